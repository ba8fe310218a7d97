"""run_flow: [inputs ->] curate -> [heldout -> decontaminate ->] tokenizer -> tokenize -> train -> [eval ->]
report, skipping what is unchanged; a stage that fails still leaves report.md for the stages that finished
before it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from trident.flow import heldout_clean, inputs, stages, start_model
from trident.flow.checks import heldout_source, holds_out_itself
from trident.flow.interrupted import FlowInterrupted, child_stage, resume_command
from trident.flow.spec import Flow, FlowError, load_flow
from trident.flow.stamp import Stages, stage_key

# the one line a flow whose evaluation reads the hub prints when that evaluation fails
HUB_HINT = ("eval failed ({error}); its tasks' data comes from the Hugging Face hub (the flow file gives no "
            "eval.data_dir or eval.heldout): where the hub cannot be reached, give eval.data_dir (a folder of "
            "the tasks' files, docs/evaluation.md), eval.heldout (tasks from a source's held-out documents, "
            "docs/flow.md) or `eval: none` to skip evaluation")


def run_flow(flow_file: str | Path, out: str | Path, raw: dict | None = None, resume: str | None = None) -> dict:
    """Run the flow file's stages (or those of its parsed content `raw`) under OUT; returns {stage: key}
    and the names of the stages that ran. Every mistake in the flow file is raised before any stage runs.
    `resume`: the command that goes on after a stop on a signal (default: `trident run FLOW --out OUT`)."""
    flow, out, flow_file = load_flow(flow_file, raw), Path(out), Path(flow_file)
    resume = resume or resume_command(flow_file, out)
    out.mkdir(parents=True, exist_ok=True)
    runner, keys = Stages(out, total=_stage_count(flow), files=lambda name: stages.stage_files(flow, out, name)), {}
    if flow.eval.tasks and inputs.eval_data(flow, out) is None:
        print(f"eval: tasks {', '.join(flow.eval.tasks)} will be read from the Hugging Face hub "
              f"(no eval.data_dir or eval.heldout in the flow file)", flush=True)
    try:
        _run_stages(flow, out, flow_file, runner, keys, resume)
    except KeyboardInterrupt:  # Ctrl-C in a stage that runs in this process (curate, tokenize): said as one
        stop = FlowInterrupted(runner.current or "?", resume, "SIGINT")
        _report_stages_before(flow, out, flow_file, runner, stop)
        raise stop from None
    except Exception as error:
        _report_stages_before(flow, out, flow_file, runner, error)
        raise
    summary = {"keys": keys, "ran": runner.ran, "report": str(out / "report.md")}
    (out / "flow.json").write_text(json.dumps(summary, indent=1))
    return summary


def _stage_count(flow: Flow) -> int:
    evaluations = (1 + (flow.eval.untrained or start_model.continues(flow))) if flow.eval.tasks else 0
    generated = sum(1 for s in flow.sources if s.generate)
    per_source = 3 if flow.eval.heldout else 2  # curate, [decontaminate,] tokenize
    imported = start_model.continues(flow) and start_model.is_hf_folder(Path(flow.train.from_))  # the start stage
    # then tokenizer, train, report
    return generated + bool(flow.eval.heldout) + per_source * len(flow.sources) + 3 + evaluations + imported


def _run_stages(flow: Flow, out: Path, flow_file: Path, runner: Stages, keys: dict, resume: str) -> None:
    _prepare_inputs(flow, out, runner, keys)
    _curate(flow, out, runner, keys)
    _decontaminate(flow, out, runner, keys)
    _tokenize(flow, out, runner, keys)
    data = [keys[f"tokenize:{s.name}"] for s in flow.sources]
    keys["train"] = stage_key({"train": flow.train, "weights": [s.weight for s in flow.sources]},
                              _config_files(flow), data)
    runner.run("train", keys["train"], lambda: stages.trained(out),
               lambda again: child_stage("train", out / "train", resume, lambda: stages.train(flow, out, again)))
    _evaluate(flow, out, runner, keys, resume)
    curated = [keys[f"curate:{s.name}"] for s in flow.sources] + [_training_key(keys, s) for s in flow.sources]
    keys["report"] = stage_key({"sample": flow.sample, "tasks": flow.eval.tasks}, [],
                               [keys["train"], keys.get("eval", ""), keys.get("eval:untrained", ""), *curated, *data])
    runner.run("report", keys["report"], lambda: (out / "report.md").exists(),
               lambda resume: _report(flow, out, flow_file, runner.finished))


def _prepare_inputs(flow: Flow, out: Path, runner: Stages, keys: dict) -> None:
    """Generated sources, then the held-out tasks of a generator that holds out documents itself."""
    for source in (s for s in flow.sources if s.generate):
        name = f"inputs:{source.name}"
        keys[name] = stage_key({"generate": source.generate})
        runner.run(name, keys[name], lambda s=source: inputs.generated_file(out, s).exists(),
                   lambda resume, s=source: inputs.generate(out, s))
    held = heldout_source(flow)
    if held is not None and holds_out_itself(held):
        _heldout(flow, out, runner, keys, keys[f"inputs:{held.name}"])


def _heldout(flow: Flow, out: Path, runner: Stages, keys: dict, upstream: str) -> None:
    keys["heldout"] = stage_key({"heldout": flow.eval.heldout}, [], [upstream])
    runner.run("heldout", keys["heldout"], lambda: (out / "eval_data").is_dir() and
               heldout_clean.documents_file(out).exists(),
               lambda resume: inputs.heldout(flow, out))


def _curate(flow: Flow, out: Path, runner: Stages, keys: dict) -> None:
    """Each source through its pipeline; the source eval.heldout holds documents out of comes first,
    so its held-out tasks exist when the sources decontaminated against them are curated."""
    held = heldout_source(flow)
    for source in sorted(flow.sources, key=lambda s: s is not held):
        name = f"curate:{source.name}"
        upstream = [keys.get(f"inputs:{source.name}", "")] + ([keys.get("heldout", "")] if source.decontaminate else [])
        settings = stages.curate_settings(flow, out, source)
        keys[name] = stage_key({"curate": settings, "source": source.name}, source.files, upstream)
        runner.run(name, keys[name], lambda s=source: (out / "curated" / s.name / "stats.json").exists(),
                   lambda resume, s=source: stages.curate(flow, out, s, resume))
        if source is held and not holds_out_itself(source):
            _heldout(flow, out, runner, keys, keys[name])


def _decontaminate(flow: Flow, out: Path, runner: Stages, keys: dict) -> None:
    """With eval.heldout, every source's curated text with the held-out documents' 13-grams cut out
    (heldout_clean.py): a copy in another source, or a near-copy dedup kept, is not trained on."""
    if not flow.eval.heldout:
        return
    rule = {"frequent_docs": heldout_clean.FREQUENT_DOCS, "copy_share": heldout_clean.COPY_SHARE,
            "copy_ngrams": heldout_clean.COPY_NGRAMS}  # a folder cleaned by an older rule is cleaned again
    for source in flow.sources:
        name = f"decontaminate:{source.name}"
        keys[name] = stage_key({"decontaminate": heldout_clean.TASK, "source": source.name, "rule": rule},
                               [], [keys[f"curate:{source.name}"], keys["heldout"]])
        runner.run(name, keys[name], lambda s=source: (heldout_clean.folder(out, s) / "stats.json").exists(),
                   lambda resume, s=source: heldout_clean.decontaminate(flow, out, s, resume))


def _training_key(keys: dict, source) -> str:
    """The key of the stage whose shards are tokenized: decontaminate with eval.heldout, else curate."""
    return keys.get(f"decontaminate:{source.name}", keys[f"curate:{source.name}"])


def _start(flow: Flow, out: Path, runner: Stages, keys: dict) -> None:
    """train.from's Hugging Face folder imported into OUT/start (a trident checkpoint is used where it is)."""
    source = Path(flow.train.from_)
    if not start_model.is_hf_folder(source):
        return
    keys["start"] = stage_key({"start": str(source)}, sorted(p for p in source.iterdir() if p.is_file()), [])
    runner.run("start", keys["start"], lambda: start_model.start_checkpoint(flow, out).is_dir(),
               lambda resume: start_model.import_start(flow, out))


def _tokenize(flow: Flow, out: Path, runner: Stages, keys: dict) -> None:
    curated = [_training_key(keys, s) for s in flow.sources]
    if start_model.continues(flow):  # the starting model's own tokenizer: none is trained
        _start(flow, out, runner, keys)
    given = [stages.tokenizer_path(flow, out)] if flow.tokenizer.path or start_model.continues(flow) else []
    keys["tokenizer"] = stage_key({"tokenizer": flow.tokenizer}, given, [] if given else curated)
    shards = lambda: [p for s in flow.sources for p in heldout_clean.training_shards(flow, out, s)]  # noqa: E731
    runner.run("tokenizer", keys["tokenizer"], lambda: stages.tokenizer_path(flow, out).exists(),
               lambda resume: None if given else stages.tokenizer(flow, out, shards()))
    for source in flow.sources:
        name = f"tokenize:{source.name}"
        keys[name] = stage_key({"source": source.name}, [], [_training_key(keys, source), keys["tokenizer"]])
        runner.run(name, keys[name], lambda s=source: (out / "data" / f"{s.name}.stats.json").exists(),
                   lambda resume, s=source: stages.tokenize(flow, out, s))


def _evaluate(flow: Flow, out: Path, runner: Stages, keys: dict, resume: str) -> None:
    """The trained (and, with eval.untrained, the initialised) model on the flow's tasks; none without tasks."""
    if not flow.eval.tasks:
        print("\n== eval: skipped (the flow file gives no evaluation tasks) ==", flush=True)
        return
    evaluation = [keys.get("heldout", "")]
    keys["eval"] = stage_key({"eval": flow.eval}, _eval_files(flow), [keys["train"], *evaluation])
    try:
        runner.run("eval", keys["eval"], lambda: (out / "eval" / "results.json").exists(),
                   lambda again: child_stage("eval", None, resume, lambda: stages.evaluate(flow, out)))
        if flow.eval.untrained or start_model.continues(flow):  # with train.from: the base model's scores
            keys["eval:untrained"] = stage_key({"eval": flow.eval, "train": flow.train}, _config_files(flow),
                                               [keys["tokenizer"], *evaluation])
            runner.run("eval:untrained", keys["eval:untrained"],
                       lambda: (out / "eval-untrained" / "results.json").exists(),
                       lambda resume: stages.evaluate_untrained(flow, out))
    except FlowInterrupted:
        raise
    except Exception as error:
        if inputs.eval_data(flow, out) is None:
            raise FlowError(HUB_HINT.format(error=" ".join(str(error).split()))) from error
        raise


def _report_stages_before(flow: Flow, out: Path, flow_file: Path, runner: Stages, error: Exception) -> None:
    """report.md for the stages that finished (this run or an earlier one) before `runner.current` failed."""
    if not runner.finished or runner.current == "report":
        return
    from trident.flow.report import write_flow_report

    try:
        said = str(error) if isinstance(error, FlowError) else f"{type(error).__name__}: {error}"
        stopped = (runner.current or "?", " ".join(said.split()))
        interrupted = (error.headline(), error.resume) if isinstance(error, FlowInterrupted) else None
        runner.forget("report")  # this report.md is not the report stage's: the next run writes that one
        report = write_flow_report(flow, out, flow_file, runner.finished, stopped, interrupted)
        print(f"report of the stages that finished ({', '.join(runner.finished)}): {report}", file=sys.stderr)
    except Exception as problem:  # the stage's own error is what the user must see; this one is said in a line
        print(f"report.md not written ({type(problem).__name__}: {' '.join(str(problem).split())})", file=sys.stderr)


def _config_files(flow: Flow) -> list[str]:
    return [flow.train.config] if Path(flow.train.config).is_file() else []


def _eval_files(flow: Flow) -> list[Path]:
    data_dir = flow.eval.data_dir
    return sorted(p for p in Path(data_dir).rglob("*") if p.is_file()) if data_dir else []


def _report(flow: Flow, out: Path, flow_file: Path, finished: list[str]) -> None:
    from trident.flow.report import write_flow_report

    print(f"report: {write_flow_report(flow, out, flow_file, finished)}")
