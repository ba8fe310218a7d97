"""results.json (written atomically, strict JSON) and the paper-style table printed after a run."""
from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trident.text.atomic import write_json_atomic
from trident.text.storage import location

# metrics shown as percentages; everything else (perplexity) is printed as is
PERCENT_PREFIXES = ("acc", "pct")


def _strict(value):
    """NaN/inf -> None so the file is valid JSON for any reader."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def write_results(results: dict, out_dir: str | Path) -> Path:
    """Write OUT/results.json (local or an fsspec URL) atomically: never a half-written file."""
    return write_json_atomic(location(out_dir) / "results.json", _strict(results), indent=2, ensure_ascii=False,
                             allow_nan=False)


def _cell(metric: str, value, err) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if metric.startswith(PERCENT_PREFIXES):
        text = f"{100 * value:.1f}"
        return text + (f" ± {100 * err:.1f}" if err is not None and math.isfinite(err) else "")
    text = f"{value:.4g}"
    return text + (f" ± {err:.2g}" if err is not None and math.isfinite(err) else "")


def build_table(results: dict) -> Table:
    """Rows: task x metric (primary first); columns: n and one per shot count, as the paper's tables."""
    shot_keys = sorted({k for per_task in results["results"].values() for k in per_task}, key=int)
    table = Table(title=f"trident eval: {results['model'].get('name', 'model')}")
    table.add_column("Task", no_wrap=True)
    table.add_column("Metric", no_wrap=True)
    table.add_column("n", justify="right")
    for k in shot_keys:
        table.add_column(f"{k}-shot", justify="right")
    for task, per_shot in results["results"].items():
        first = next(iter(per_shot.values()))
        names = list(first["metrics"])
        primary = first.get("primary_metric")
        if primary in names:
            names.remove(primary)
            names.insert(0, primary)
        for i, metric in enumerate(names):
            cells = []
            for k in shot_keys:
                entry = per_shot.get(k)
                cells.append("" if entry is None else
                             _cell(metric, entry["metrics"].get(metric), entry["stderr"].get(metric)))
            table.add_row(task if i == 0 else "", metric, str(first["n"]) if i == 0 else "", *cells)
    return table


def build_protocol_table(results: dict) -> Table:
    """The paper's layout: one row per task, zero / one / few shot, each of ours beside the paper's."""
    protocol = results["protocol"]
    paper = protocol["paper_model"]
    table = Table(title=f"trident eval --protocol {protocol['name']}: {results['model'].get('name', 'model')} "
                        f"vs {paper} (%)")
    for name in ("Task", "Metric"):
        table.add_column(name, no_wrap=True)
    table.add_column("n", justify="right")
    for setting in ("zero", "one", "few"):
        if setting == "few":
            table.add_column("k", justify="right")
        table.add_column(f"{setting}-shot", justify="right")
        table.add_column(paper.split()[-1], justify="right")
    for row in protocol.get("rows", []):
        cells = []
        for setting in ("zero", "one", "few"):
            cell = row[setting]
            ours = "-" if cell["trident_pct"] is None else f"{cell['trident_pct']:.1f}"
            cells += ([str(cell["k"])] if setting == "few" else []) + [ours, f"{cell['paper_pct']:.1f}"]
        table.add_row(row["label"], row["metric"], str(row["n"] or "-"), *cells)
    return table


def build_spread_table(results: dict) -> Table | None:
    """Per task, shot count and metric: mean, sd, min and max over the few-shot draws, and the share
    of examples whose correctness flipped; None when no cell was drawn more than once."""
    rows = [(task, k, metric, stats) for task, per_shot in results["results"].items()
            for k, entry in sorted(per_shot.items(), key=lambda item: int(item[0]))
            for metric, stats in entry.get("fewshot_spread", {}).get("metrics", {}).items()]
    if not rows:
        return None
    draws = len(results.get("fewshot_seeds", []))
    table = Table(title=f"few-shot spread over {draws} draws (seeds {', '.join(map(str, results['fewshot_seeds']))})")
    for name in ("Task", "k", "Metric", "mean", "sd", "min", "max", "flipped"):
        table.add_column(name, no_wrap=True, justify="left" if name in ("Task", "Metric") else "right")
    for i, (task, k, metric, stats) in enumerate(rows):
        first = i == 0 or rows[i - 1][:2] != (task, k)
        flipped = stats.get("flipped")
        table.add_row(task if first else "", k if first else "", metric,
                      *(_cell(metric, stats[key], None) for key in ("mean", "std", "min", "max")),
                      "" if flipped is None else f"{100 * flipped:.0f}%")
    return table


def print_table(results: dict, console: Console | None = None) -> None:
    """Print the results table (the paper's layout under a protocol; the few-shot spread and a bias
    summary when present)."""
    console = console or Console()
    console.print(build_protocol_table(results) if "protocol" in results else build_table(results))
    spread_table = build_spread_table(results)
    if spread_table is not None:
        console.print(spread_table)
    for line in contamination_lines(results):
        console.print(line)
    if "bias" in results:
        from trident.evaluate.bias import summary_lines

        for line in summary_lines(results["bias"]):
            console.print(line)


def contamination_lines(results: dict) -> list[str]:
    """One line per task and shot count with a contamination report: dirty share, clean score."""
    lines = []
    for task, per_shot in results["results"].items():
        for k, entry in per_shot.items():
            report = entry.get("contamination")
            if report is None:
                continue
            metric = entry["primary_metric"]
            clean = report["clean_metrics"].get(metric)
            clean_text = "-" if clean is None else _cell(metric, clean, None)
            overall = _cell(metric, entry["metrics"][metric], None)
            lines.append(f"contamination {task} {k}-shot: {report['dirty']}/{entry['n']} examples share a "
                         f"{report['ngram']}-gram with the corpus; {metric} all {overall}, "
                         f"clean {clean_text} (n={report['clean_n']})")
    return lines
