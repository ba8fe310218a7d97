"""Plot a run's in-training downstream scores (config `eval`) from its metrics.jsonl.

    python -m trident.train.eval_curves RUN/metrics.jsonl OUT.png [--metric acc,acc_norm]

One panel per task: each shot count's scores (the named metrics, else every metric but perplexity,
which is not on a 0-1 scale) against the training step, with the training loss (and validation
loss, where logged) on a last panel; the evaluations' cost in seconds is
given in the title. Reads only the `eval/<task>/<k>shot/<metric>` fields the trainer writes.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from trident.train.metrics import read_metrics


def eval_series(records: list[dict], metric: str | None = None) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """task -> "<k>shot/<metric>" -> [(step, value)], for the comma-separated metrics named, or every
    metric but perplexity when None."""
    wanted = (lambda name: name in metric.split(",")) if metric else (lambda name: name != "perplexity")
    series: dict = defaultdict(lambda: defaultdict(list))
    for record in records:
        for key, value in record.items():
            parts = key.split("/")
            if len(parts) == 4 and parts[0] == "eval" and wanted(parts[3]):
                series[parts[1]][f"{parts[2]}/{parts[3]}"].append((record["step"], value))
    return {task: dict(lines) for task, lines in series.items()}


def plot(records: list[dict], out: Path, metric: str | None = None, title: str = "") -> Path:
    """Write the figure to `out` (PNG); raises ValueError when the records hold no evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = eval_series(records, metric)
    if not series:
        raise ValueError("no eval/<task>/<k>shot/<metric> fields in these metrics: set eval.tasks and eval.interval")
    seconds = [r["eval/seconds"] for r in records if "eval/seconds" in r]
    fig, axes = plt.subplots(1, len(series) + 1, figsize=(4.2 * (len(series) + 1), 3.4))
    for ax, (task, lines) in zip(axes, sorted(series.items())):
        for name, points in sorted(lines.items()):
            ax.plot(*zip(*points), marker="o", markersize=3, label=name)
        ax.set(title=task, xlabel="step", ylabel=metric or "score")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    loss = axes[-1]
    loss.plot([r["step"] for r in records], [r["loss"] for r in records], lw=1, label="train loss")
    validation = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    if validation:
        loss.plot(*zip(*validation), marker="o", markersize=3, label="validation loss")
    loss.set(title="loss", xlabel="step")
    loss.legend(fontsize=7)
    loss.grid(alpha=0.3)
    cost = f"{len(seconds)} evaluations, {sum(seconds):.0f} s in all" if seconds else ""
    fig.suptitle(" - ".join(t for t in (title, cost) if t), fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trident.train.eval_curves", description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="a run's metrics.jsonl (a path or URL: read with its parts on a store)")
    parser.add_argument("out", type=Path, help="PNG to write")
    parser.add_argument("--metric", help="only these metrics, comma-separated (e.g. acc,acc_norm); "
                                         "default every one but perplexity")
    parser.add_argument("--title", default="", help="figure title")
    args = parser.parse_args(argv)
    try:
        plot(read_metrics(args.metrics), args.out, args.metric, args.title)
    except (OSError, ValueError) as error:
        print(f"eval_curves: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
