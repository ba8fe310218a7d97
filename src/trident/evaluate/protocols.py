"""Named evaluation protocols: a paper's tasks, shot counts and published numbers, so one flag
(`trident eval CKPT --protocol mtnlg`) reruns its table and prints ours beside it.

The numbers are those of docs/reference.md ("Published numbers": MT-NLG 530B accuracy at zero,
one and few shot, and the few-shot k of each task); tests/test_eval_protocol.py checks they agree.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperRow:
    task: str  # trident task name
    label: str  # as the paper names it
    k: int  # examples in the few-shot setting
    published: tuple[float, float, float]  # zero-, one-, few-shot accuracy in %


PROTOCOLS: dict[str, tuple[PaperRow, ...]] = {
    "mtnlg": (
        PaperRow("lambada", "LAMBADA", 15, (76.6, 73.1, 87.2)),
        PaperRow("piqa", "PIQA", 50, (82.0, 81.0, 83.2)),
        PaperRow("hellaswag", "HellaSwag", 20, (80.2, 80.2, 82.4)),
        PaperRow("winogrande", "WinoGrande", 50, (73.0, 73.7, 78.9)),
        PaperRow("boolq", "BoolQ", 32, (78.2, 82.5, 84.8)),
        PaperRow("race", "RACE-h", 10, (47.9, 48.4, 47.9)),
        PaperRow("wic", "WiC", 32, (48.6, 51.3, 58.5)),
        PaperRow("anli_r2", "ANLI R2", 50, (36.6, 39.7, 39.6)),
    ),
}
PAPER_MODEL = {"mtnlg": "MT-NLG 530B"}
SETTINGS = ("zero", "one", "few")


def _rows(name: str) -> tuple[PaperRow, ...]:
    if name not in PROTOCOLS:
        raise KeyError(f"unknown protocol {name!r}; known: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def protocol_cells(name: str) -> dict[str, list[int]]:
    """task -> [0, 1, k]: the shot counts the paper reports for it."""
    return {row.task: [0, 1, row.k] for row in _rows(name)}


def describe(name: str) -> dict:
    """The protocol as results.json records it before any scoring."""
    return {"name": name, "paper_model": PAPER_MODEL[name], "source": "docs/reference.md, Published numbers",
            "fewshot_k": {row.task: row.k for row in _rows(name)}}


def paper_rows(name: str, results: dict) -> list[dict]:
    """One row per task: its primary metric in % at zero, one and few shot, ours beside the paper's."""
    rows = []
    for row in _rows(name):
        per_shot = results["results"].get(row.task, {})
        metric = next(iter(per_shot.values()), {}).get("primary_metric", "acc")
        cells = {}
        for setting, k, published in zip(SETTINGS, (0, 1, row.k), row.published):
            entry = per_shot.get(str(k))
            ours = None if entry is None else entry["metrics"].get(metric)
            cells[setting] = {"k": k, "trident_pct": None if ours is None else round(100 * ours, 2),
                              "paper_pct": published}
        rows.append({"task": row.task, "label": row.label, "metric": metric,
                     "n": next(iter(per_shot.values()), {}).get("n"), **cells})
    return rows
