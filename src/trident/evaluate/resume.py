"""Partial results and resuming: a run that stops keeps the task/shot cells it finished.

`run_evaluation` rewrites OUT/results.json with `"partial": true` after every finished cell (samples
first, then results, each file atomically), and with `"partial": false` at the end. A later run
given that folder as `resume_from` reuses the finished cells it asks for, when the run settings
are the same, and scores only the rest.
"""
from __future__ import annotations

import json
from pathlib import Path

from trident.evaluate.preflight import PreflightError
from trident.text.storage import location

SETTINGS = ("seed", "limit", "fewshot_construction", "fewshot_seeds")
# facts about how the model ran, not what it is: they do not change a score
RUNTIME_KEYS = ("batch_size", "device", "world_size", "parallel")


def read_results(out_dir: str | Path | None) -> dict | None:
    """OUT/results.json, or None when there is none."""
    path = location(out_dir) / "results.json" if out_dir is not None else None
    if path is None or not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise PreflightError(f"{path}: not valid JSON ({error}); pass --overwrite to start again") from None


def is_partial(results: dict | None) -> bool:
    return bool(results) and results.get("partial") is True


def finished_cells(earlier: dict, header: dict, cells: dict[str, list[int]], sources: dict[str, str],
                   where: str) -> dict[tuple[str, int], dict]:
    """(task, k) -> entry of the earlier partial run's cells that this run asks for, from the same data.

    Raises PreflightError when the earlier run used other settings or another model."""
    changed = [f"{key} {earlier.get(key)!r} there, {header.get(key)!r} now" for key in SETTINGS
               if earlier.get(key) != header.get(key)]
    if _model(earlier.get("model", {})) != _model(header["model"]):
        changed.append("another model")
    if changed:
        raise PreflightError(f"{where} holds a partial evaluation with other settings ({'; '.join(changed)}); "
                             f"pass --overwrite to start again, or choose another --out")
    return {(name, int(k)): entry for name, per_shot in earlier.get("results", {}).items() if name in cells
            for k, entry in per_shot.items() if int(k) in cells[name] and entry.get("data") == sources[name]}


def _model(info: dict) -> dict:
    return {key: value for key, value in info.items() if key not in RUNTIME_KEYS}
