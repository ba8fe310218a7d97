"""report.md of a flow: curation funnel, corpus, loss curve, a sample and the evaluation table, as the
demo's, from the outputs of the stages that finished: a flow stopped by a failed stage still reports
the stages before it, and one that skips evaluation says so."""
from __future__ import annotations

from pathlib import Path

from trident.flow.heldout_clean import report_section
from trident.flow.report_page import latest_per_step, plot_loss, write_report
from trident.flow.spec import Flow
from trident.flow.stages import read_json
from trident.flow.stamp import read_stamp


def eval_table(results: dict, untrained: dict | None = None, before_label: str = "untrained") -> str:
    """One row per task and metric, one column per shot count (after an untrained 0-shot column
    when the flow evaluated the untrained model too; `before_label` base model for a continued one)."""
    shots = sorted({int(k) for per_shot in results["results"].values() for k in per_shot})
    before = [f"{before_label} 0-shot"] if untrained else []
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


def funnel(flow: Flow, out: Path, done: set[str]) -> str:
    """Records in -> documents kept per curated source, with a link to each source's funnel chart."""
    lines = ["| source | weight | records in | documents kept | tokens |", "|---|---|---|---|---|"]
    for source in flow.sources:
        if f"curate:{source.name}" not in done:
            lines.append(f"| {source.name} | {source.weight:g} | not curated | | |")
            continue
        stats = read_json(out / "curated" / source.name / "stats.json")
        tokens = _data_stats(out, source)["tokens"] if f"tokenize:{source.name}" in done else None
        lines.append(f"| [{source.name}](curated/{source.name}/report.md) | {source.weight:g} | "
                     f"{stats['stages'][0]['counters'].get('in', 0)} | {stats['output']['documents']} | "
                     f"{'not tokenized' if tokens is None else f'{tokens:,}'} |")
    return "\n".join(lines)


def evaluation(flow: Flow, out: Path, done: set[str]) -> str:
    """The evaluation table, or why there is none."""
    if not flow.eval.tasks:
        return "Skipped: the flow file gives no evaluation tasks (`eval: {tasks: []}` or `eval: none`)."
    if "eval" not in done:
        return "Not run: the flow stopped before its eval stage finished."
    untrained = read_json(out / "eval-untrained" / "results.json") if "eval:untrained" in done else None
    label = f"base model ({Path(flow.train.from_).name})" if flow.train.from_ else "untrained"
    return eval_table(read_json(out / "eval" / "results.json"), untrained, label)


def write_flow_report(flow: Flow, out: Path, flow_file: Path, done: list[str],
                      stopped: tuple[str, str] | None = None, interrupted: tuple[str, str] | None = None) -> Path:
    """OUT/report.md (and OUT/loss.png once training finished) from the outputs of the stages in
    `done`; `stopped`: (stage, error) of the stage that failed, said at the top; `interrupted`: (where,
    the command that resumes) instead when that stage stopped on a signal."""
    finished = set(done)
    tokenized = [s for s in flow.sources if f"tokenize:{s.name}" in finished]
    sections = {"Curation": funnel(flow, out, finished), "Held-out text kept out of training":
                report_section(flow, out, finished), "Evaluation": evaluation(flow, out, finished)}
    summary = {"title": f"trident run report: {flow_file.name}", "stopped": None if interrupted else stopped,
               "interrupted": interrupted,
               "sections": {title: text for title, text in sections.items() if text is not None}}
    if tokenized and "tokenizer" in finished:
        stats = [_data_stats(out, s) for s in tokenized]
        summary["corpus"] = (f"{sum(s['documents'] for s in stats)} curated documents from {len(tokenized)} "
                             f"source(s), {sum(s['tokens'] for s in stats):,} tokens "
                             f"(tokenizer vocabulary {_vocab_size(flow, out)})")
    if "train" in finished:
        summary.update(_training(flow, out, flow_file))
    return write_report(out, summary)


def _training(flow: Flow, out: Path, flow_file: Path) -> dict:
    """The trained model's part of the report: loss curve, train stage time, validation loss, a sample."""
    from trident.flow.stages import sample
    from trident.train.metrics import read_metrics

    metrics = latest_per_step(read_metrics(out / "train" / "metrics.jsonl"))  # a resumed run logs steps again
    val = [m["val_loss"] for m in metrics if m.get("val_loss") is not None]
    plot_loss(metrics, out / "loss.png", title=f"trident run {flow_file.name}: loss")
    print(f"loss {metrics[0]['loss']:.3f} -> {metrics[-1]['loss']:.3f} over {len(metrics)} logged steps")
    return {"config": flow.train.config, "metrics": metrics, "val_loss": val[-1] if val else None,
            "stage_seconds": read_stamp(out, "train").get("seconds"),
            "step_seconds": sum(m.get("step_time_s", 0.0) for m in metrics), **sample(flow, out)}


def _data_stats(out: Path, source) -> dict:
    return read_json(out / "data" / f"{source.name}.stats.json")


def _vocab_size(flow: Flow, out: Path) -> int:
    from trident.data.tokenizer import Tokenizer
    from trident.flow.stages import tokenizer_path

    return Tokenizer.load(tokenizer_path(flow, out)).vocab_size
