"""report.md of a flow: loss curve, curation funnel, evaluation table and a sample, as the demo's."""
from __future__ import annotations

from pathlib import Path

from trident.flow.report_page import plot_loss, write_report
from trident.flow.spec import Flow
from trident.flow.stages import read_json


def eval_table(results: dict, untrained: dict | None = None) -> str:
    """One row per task and metric, one column per shot count (after an untrained 0-shot column
    when the flow evaluated the untrained model too)."""
    shots = sorted({int(k) for per_shot in results["results"].values() for k in per_shot})
    before = ["untrained 0-shot"] if untrained else []
    lines = ["| task | metric | n | " + " | ".join(before + [f"{k}-shot" for k in shots]) + " |",
             "|---|---|---|" + "---|" * (len(shots) + len(before))]
    for task, per_shot in results["results"].items():
        first = per_shot[str(shots[0])]
        for metric in first["metrics"]:
            cells = [per_shot[str(k)]["metrics"][metric] if str(k) in per_shot else float("nan") for k in shots]
            if untrained:
                cells.insert(0, untrained["results"][task]["0"]["metrics"][metric])
            lines.append(f"| {task} | {metric} | {first['n']} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return "\n".join(lines)


def funnel(flow: Flow, out: Path) -> str:
    """Records in -> documents kept per source, with a link to each source's funnel chart."""
    lines = ["| source | weight | records in | documents kept | tokens |", "|---|---|---|---|---|"]
    for source in flow.sources:
        stats = read_json(out / "curated" / source.name / "stats.json")
        tokens = read_json(out / "data" / f"{source.name}.stats.json")["tokens"]
        lines.append(f"| [{source.name}](curated/{source.name}/report.md) | {source.weight:g} | "
                     f"{stats['stages'][0]['counters'].get('in', 0)} | {stats['output']['documents']} | {tokens:,} |")
    return "\n".join(lines)


def write_flow_report(flow: Flow, out: Path, flow_file: Path, metrics: list[dict], sample: dict) -> Path:
    """OUT/report.md and OUT/loss.png from the stages' outputs on disk."""
    tokens = sum(read_json(out / "data" / f"{s.name}.stats.json")["tokens"] for s in flow.sources)
    documents = sum(read_json(out / "data" / f"{s.name}.stats.json")["documents"] for s in flow.sources)
    val = [m["val_loss"] for m in metrics if m.get("val_loss") is not None]
    before = out / "eval-untrained" / "results.json"
    untrained = read_json(before) if flow.eval.untrained and before.exists() else None
    summary = {"title": f"trident run report: {flow_file.name}",
               "corpus": f"{documents} curated documents from {len(flow.sources)} source(s)", "tokens": tokens,
               "vocab_size": _vocab_size(flow, out), "config": flow.train.config, "metrics": metrics,
               "train_seconds": sum(m.get("step_time_s", 0.0) for m in metrics),
               "val_loss": val[-1] if val else None, **sample,
               "sections": {"Curation": funnel(flow, out),
                            "Evaluation": eval_table(read_json(out / "eval" / "results.json"), untrained)}}
    plot_loss(metrics, out / "loss.png", title=f"trident run {flow_file.name}: loss")
    return write_report(out, summary)


def _vocab_size(flow: Flow, out: Path) -> int:
    from trident.data.tokenizer import Tokenizer
    from trident.flow.stages import tokenizer_path

    return Tokenizer.load(tokenizer_path(flow, out)).vocab_size
