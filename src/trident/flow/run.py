"""run_flow: [inputs ->] curate -> tokenizer -> tokenize -> train -> eval -> report, skipping what is unchanged."""
from __future__ import annotations

import json
from pathlib import Path

from trident.flow import inputs, stages
from trident.flow.spec import Flow, load_flow
from trident.flow.stamp import Stages, stage_key


def run_flow(flow_file: str | Path, out: str | Path, raw: dict | None = None) -> dict:
    """Run the flow file's stages (or those of its parsed content `raw`) under OUT; returns {stage: key}
    and the names of the stages that ran."""
    flow, out, flow_file = load_flow(flow_file, raw), Path(out), Path(flow_file)
    out.mkdir(parents=True, exist_ok=True)
    generated = [s for s in flow.sources if s.generate]
    total = len(generated) + bool(flow.eval.heldout) + 2 * len(flow.sources) + 4 + flow.eval.untrained
    runner, keys = Stages(out, total=total), {}
    _prepare_inputs(flow, out, runner, keys)
    _curate_and_tokenize(flow, out, runner, keys)
    data = [keys[f"tokenize:{s.name}"] for s in flow.sources]
    keys["train"] = stage_key({"train": flow.train, "weights": [s.weight for s in flow.sources]},
                              _config_files(flow), data)
    runner.run("train", keys["train"], lambda: stages.trained(out),
               lambda resume: stages.train(flow, out, resume))
    evaluation = [keys.get("heldout", "")]
    keys["eval"] = stage_key({"eval": flow.eval}, _eval_files(flow), [keys["train"], *evaluation])
    runner.run("eval", keys["eval"], lambda: (out / "eval" / "results.json").exists(),
               lambda resume: stages.evaluate(flow, out))
    if flow.eval.untrained:
        keys["eval:untrained"] = stage_key({"eval": flow.eval, "train": flow.train}, _config_files(flow),
                                           [keys["tokenizer"], *evaluation])
        runner.run("eval:untrained", keys["eval:untrained"], lambda: (out / "eval-untrained" / "results.json").exists(),
                   lambda resume: stages.evaluate_untrained(flow, out))
    curated = [keys[f"curate:{s.name}"] for s in flow.sources]
    keys["report"] = stage_key({"sample": flow.sample}, [], [keys["eval"], keys.get("eval:untrained", ""),
                                                              *curated, *data])
    runner.run("report", keys["report"], lambda: (out / "report.md").exists(),
               lambda resume: _report(flow, out, flow_file))
    summary = {"keys": keys, "ran": runner.ran, "report": str(out / "report.md")}
    (out / "flow.json").write_text(json.dumps(summary, indent=1))
    return summary


def _prepare_inputs(flow: Flow, out: Path, runner: Stages, keys: dict) -> None:
    """Generated sources, then the held-out evaluation tasks built from one of them."""
    for source in (s for s in flow.sources if s.generate):
        name = f"inputs:{source.name}"
        keys[name] = stage_key({"generate": source.generate})
        runner.run(name, keys[name], lambda s=source: inputs.generated_file(out, s).exists(),
                   lambda resume, s=source: inputs.generate(out, s))
    if flow.eval.heldout:
        keys["heldout"] = stage_key({"heldout": flow.eval.heldout}, [], [keys[f"inputs:{flow.eval.heldout.source}"]])
        runner.run("heldout", keys["heldout"], lambda: (out / "eval_data").is_dir(),
                   lambda resume: inputs.heldout(flow, out))


def _curate_and_tokenize(flow: Flow, out: Path, runner: Stages, keys: dict) -> None:
    for source in flow.sources:
        name = f"curate:{source.name}"
        upstream = [keys.get(f"inputs:{source.name}", "")] + ([keys.get("heldout", "")] if source.decontaminate else [])
        settings = stages.curate_settings(flow, out, source)
        keys[name] = stage_key({"curate": settings, "source": source.name}, source.files, upstream)
        runner.run(name, keys[name], lambda s=source: (out / "curated" / s.name / "stats.json").exists(),
                   lambda resume, s=source: stages.curate(flow, out, s, resume))
    curated = [keys[f"curate:{s.name}"] for s in flow.sources]
    given = [flow.tokenizer.path] if flow.tokenizer.path else []
    keys["tokenizer"] = stage_key({"tokenizer": flow.tokenizer}, given, [] if given else curated)
    shards = lambda: [p for s in flow.sources for p in stages.curated_shards(out, s)]  # noqa: E731
    runner.run("tokenizer", keys["tokenizer"], lambda: stages.tokenizer_path(flow, out).exists(),
               lambda resume: None if given else stages.tokenizer(flow, out, shards()))
    for source in flow.sources:
        name = f"tokenize:{source.name}"
        keys[name] = stage_key({"source": source.name}, [], [keys[f"curate:{source.name}"], keys["tokenizer"]])
        runner.run(name, keys[name], lambda s=source: (out / "data" / f"{s.name}.stats.json").exists(),
                   lambda resume, s=source: stages.tokenize(flow, out, s))


def _config_files(flow: Flow) -> list[str]:
    return [flow.train.config] if Path(flow.train.config).is_file() else []


def _eval_files(flow: Flow) -> list[Path]:
    data_dir = flow.eval.data_dir
    return sorted(p for p in Path(data_dir).rglob("*") if p.is_file()) if data_dir else []


def _report(flow, out: Path, flow_file: Path) -> None:
    from trident.flow.report import write_flow_report
    from trident.flow.report_page import latest_per_step
    from trident.train.metrics import read_metrics

    metrics = latest_per_step(read_metrics(out / "train" / "metrics.jsonl"))  # a resumed run logs steps again
    sample = stages.sample(flow, out)
    report = write_flow_report(flow, out, flow_file, metrics, sample)
    print(f"loss {metrics[0]['loss']:.3f} -> {metrics[-1]['loss']:.3f} over {len(metrics)} logged steps; "
          f"report: {report}")
