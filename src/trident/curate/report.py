"""report.md and its PNG charts (document funnel, quality-score histogram, duplicate-cluster sizes)
from a pipeline run's stats dict (the content of stats.json)."""
from __future__ import annotations

from pathlib import Path

from trident.text.damage import LOST_PREFIX, damage_summary
from trident.text.storage import location, open_write


def histogram(stats: dict, name: str) -> dict[str, int]:
    """Bins of the `hist:<name>:<bin>` counters summed over all stages, by bin label."""
    prefix = f"hist:{name}:"
    bins: dict[str, int] = {}
    for stage in stats["stages"]:
        for key, value in stage["counters"].items():
            if key.startswith(prefix):
                label = key[len(prefix):]
                bins[label] = bins.get(label, 0) + value
    return dict(sorted(bins.items(), key=lambda kv: _bin_order(kv[0])))


def _bin_order(label: str) -> tuple:
    """Sort key: numeric bins by value, an open-ended "N+" right after N's peers, other labels last."""
    try:
        return (0, float(label.removesuffix("+")), label.endswith("+"), "")
    except ValueError:
        return (1, 0.0, False, label)


def _plot(path: Path, draw) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    draw(ax)
    fig.tight_layout()
    with open_write(path) as handle:  # a local file or an object
        fig.savefig(handle, dpi=110, format="png")
    plt.close(fig)


def plot_funnel(stats: dict, path: Path) -> None:
    """Horizontal bars: documents left after each stage."""
    names = [s["name"] for s in stats["stages"]]
    kept = [s["counters"].get("out", 0) for s in stats["stages"]]

    def draw(ax):
        ax.barh(range(len(names)), kept, color="#4c72b0")
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        for y, value in enumerate(kept):
            ax.text(value, y, f" {value}", va="center", fontsize=8)
        ax.set_xlabel("documents out")
        ax.set_title("curation funnel")

    _plot(path, draw)


def plot_bins(bins: dict[str, int], path: Path, title: str, xlabel: str) -> None:
    def draw(ax):
        ax.bar(range(len(bins)), list(bins.values()), color="#55a868")
        ax.set_xticks(range(len(bins)), list(bins), rotation=90 if len(bins) > 12 else 0, fontsize=7)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("count")
        ax.set_title(title)

    _plot(path, draw)


def _stage_table(stats: dict) -> list[str]:
    rows = ["| stage | kind | in | out | dropped (by reason) | bytes in | bytes out | seconds |",
            "|---|---|---:|---:|---|---:|---:|---:|"]
    for stage in stats["stages"]:
        counters = stage["counters"]
        drops = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in counters.items() if k.startswith("dropped:")) or "-"
        rows.append(f"| {stage['name']} | {stage['kind']} | {counters.get('in', 0)} | {counters.get('out', 0)} | "
                    f"{drops} | {counters.get('bytes_in', '')} | {counters.get('bytes_out', '')} | {stage.get('seconds', '')} |")
    return rows


def _other_counters(stats: dict) -> list[str]:
    lines = []
    for stage in stats["stages"]:
        extra = {k: v for k, v in stage["counters"].items()
                 if k not in ("in", "out", "bytes_in", "bytes_out") and not k.startswith(("dropped:", "hist:", LOST_PREFIX))
                 and v}
        if extra:
            lines.append(f"- **{stage['name']}**: " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    return lines


def _cell(value, limit: int = 160) -> str:
    """Text safe in one Markdown table cell: a damaged record's bytes (control characters, newlines,
    pipes) shown escaped, and cut at `limit` characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value)).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit] + "..."


def write_report(stats: dict, out_dir: Path) -> Path:
    """Write OUT/report.md plus funnel.png (and quality_scores.png / cluster_sizes.png when the run
    produced those histograms); returns the report path."""
    out_dir = location(out_dir)
    plot_funnel(stats, out_dir / "funnel.png")
    first_in = stats["stages"][0]["counters"].get("in", 0) if stats["stages"] else 0
    lines = ["# Curation report", "",
             f"{first_in} input records -> {stats['output']['documents']} documents in "
             f"{len(stats['output']['shards'])} shard(s); executor {stats['executor']} with {stats['workers']} "
             f"worker(s), {stats['elapsed_s']} s.", "",
             f"Accounting (in = out + dropped for every stage, chained): "
             f"**{'OK' if stats['accounting']['ok'] else 'FAILED'}**"]
    lines += [f"- {p}" for p in stats["accounting"]["problems"]]
    if "drops" in stats:
        lines += ["", f"Drop log: {stats['drops']['records']} dropped documents in `drops/` ({stats['drops']['files']} "
                      f"files; stage, reason, score each); `trident curate why OUT URL|ID` finds one."]
    lines += ["", "![funnel](funnel.png)", ""] + _stage_table(stats)
    disabled = [s["stage"] for s in stats["config"]["stages"] if not s.get("enabled", True)]
    if disabled:
        lines += ["", "Disabled in this config: " + ", ".join(disabled)]
    damaged = damage_summary(stats["stages"][0]["counters"]) if stats["stages"] else []
    if damaged:
        lines += ["", "## Damaged input files", ""] + [f"- {_cell(line, 300)}" for line in damaged]
    other = _other_counters(stats)
    if other:
        lines += ["", "## Other counters", ""] + other
    for name, title, xlabel in (("quality_score", "quality scores", "score bin (x 0.05)"),
                                ("cluster_size", "duplicate-cluster sizes", "documents in cluster")):
        bins = histogram(stats, name)
        if bins:
            plot_bins(bins, out_dir / f"{name}s.png", title, xlabel)
            lines += ["", f"## {title.capitalize()}", "", f"![{name}]({name}s.png)"]
    if stats["errors"]:
        lines += ["", f"## Bad input records (first {len(stats['errors'])})", "",
                  "| file | position | reason | detail |", "|---|---|---|---|"]
        lines += [f"| {_cell(e['file'])} | {_cell(e['position'])} | {_cell(e['reason'])} | {_cell(e['detail'])} |"
                  for e in stats["errors"][:50]]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
