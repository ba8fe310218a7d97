"""The report both the embedded demo and `trident run` write: the loss curve (loss.png) and report.md."""
from __future__ import annotations

from pathlib import Path


def latest_per_step(metrics: list[dict]) -> list[dict]:
    """One record per step, in step order: a resumed run logs the steps after its checkpoint again."""
    return sorted({m["step"]: m for m in metrics}.values(), key=lambda m: m["step"])


def plot_loss(metrics: list[dict], path: Path, title: str = "trident: loss") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = latest_per_step(metrics)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([m["tokens"] for m in metrics], [m["loss"] for m in metrics], label="train loss", lw=1)
    val = [(m["tokens"], m["val_loss"]) for m in metrics if m.get("val_loss") is not None]
    if val:
        ax.plot(*zip(*val), "o-", label="validation loss")
    ax.set_xlabel("tokens")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(out: Path, summary: dict) -> Path:
    """OUT/report.md from `summary`: title; optional stopped (stage, error), interrupted (where, resume),
    corpus, metrics (with config, parameters, stage_seconds, step_seconds, val_loss, prompt, sample) and
    sections {title: markdown}."""
    lines = [f"# {summary.get('title', 'trident report')}", ""]
    if summary.get("stopped"):
        stage, error = summary["stopped"]
        lines += [f"**The flow stopped at its `{stage}` stage**: {error}", "",
                  "This report covers the stages that finished before it.", ""]
    if summary.get("interrupted"):  # a stop on request, not a failure: say where, and how to go on
        where, resume = summary["interrupted"]
        lines += [f"**The flow was {where}.** Resume with `{resume}`: finished stages are skipped and "
                  f"training goes on from its last checkpoint.", "",
                  "This report covers the stages that finished before it.", ""]
    if summary.get("corpus"):
        lines += [f"Corpus: {summary['corpus']}.", ""]
    if summary.get("metrics"):
        lines += _training_lines(summary)
    for title, section in summary.get("sections", {}).items():
        lines += [f"## {title}", "", section, ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _training_lines(summary: dict) -> list[str]:
    m = latest_per_step(summary["metrics"])
    stage = summary.get("stage_seconds")
    took = (f"the train stage took {stage:.1f} s of wall clock (the clock of the stage log's `train: done in`; "
            f"start-up, data loading and checkpoints included), {summary['step_seconds']:.1f} s of it in "
            f"training steps" if stage is not None else f"{summary['step_seconds']:.1f} s in training steps")
    lines = [f"Model: {summary['parameters']:,} parameters, config `{summary['config']}`; {len(m)} steps; {took}.",
             "", "| | step | tokens | loss |", "|---|---|---|---|",
             f"| first | {m[0]['step']} | {m[0]['tokens']:,} | {m[0]['loss']:.3f} |",
             f"| last | {m[-1]['step']} | {m[-1]['tokens']:,} | {m[-1]['loss']:.3f} |", ""]
    if summary.get("val_loss") is not None:
        lines += [f"Validation loss at the end: {summary['val_loss']:.3f}.", ""]
    return lines + ["![loss](loss.png)", "", "## Sample", "", f"Prompt: `{summary['prompt']}`", "", "```",
                    summary["sample"], "```", ""]
