"""What each stage of a flow does; trident.flow.run decides which of them run."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from trident.config.flow import CurateSection
from trident.flow.inputs import eval_data, generated_file
from trident.flow.spec import Flow, FlowError, Source, StageRefused


def source_files(out: Path, source: Source) -> list[Path]:
    return [generated_file(out, source)] if source.generate else source.files


def curate_settings(flow: Flow, out: Path, source: Source) -> CurateSection:
    """The flow's curation settings with the source's own on top (overrides appended), plus
    decontamination against the evaluation files when the source asks for it, and the holdout
    stage in the source eval.heldout builds its tasks from."""
    from trident.flow.checks import heldout_source, holds_out_itself

    settings = flow.curate_of(source)
    if source is heldout_source(flow) and not holds_out_itself(source):
        settings = _with_holdout(settings, flow.eval.heldout.every, flow.eval.heldout.seed)
    if source.decontaminate:
        tasks = decontamination_tasks(flow, out)
        settings.overrides += ["stages.decontaminate.enabled=true",
                               "stages.decontaminate.tasks={" + ", ".join(f"{k}: {v}" for k, v in tasks.items()) + "}"]
    return settings


def _with_holdout(settings: CurateSection, every: int, seed: int) -> CurateSection:
    """The settings' pipeline, overrides applied, ending with the holdout stage: held-out documents
    passed every filter and dedup as the trained ones did, so no copy of one is left to train on
    (held out before dedup, one copy could be held out and its duplicate trained on)."""
    from trident.curate.run.pipeline import load_pipeline_config

    config = load_pipeline_config(settings.config, settings.overrides)
    config.stages.append({"stage": "holdout", "every": every, "seed": seed})
    return CurateSection(dataclasses.asdict(config), [], settings.workers, settings.progress)


def decontamination_tasks(flow: Flow, out: Path) -> dict[str, str]:
    """task name -> the scored split's file, for every flow task whose file is in the evaluation data."""
    from trident.tasks import expand, get_task

    folder, found = eval_data(flow, out), {}
    if folder is None:
        raise FlowError("decontaminate: true needs evaluation files (eval.data_dir or eval.heldout)")
    for name in expand(flow.eval.tasks):
        task = get_task(name)
        files = [task.root(folder) / f for f in task.split_files(task.eval_split) or []]
        if len(files) == 1 and files[0].suffix == ".jsonl":
            found[name] = str(files[0])
    return found


def curate(flow: Flow, out: Path, source: Source, resume: bool) -> dict:
    """One source through the curation pipeline into OUT/curated/NAME (its funnel in report.md there)."""
    from trident.curate.run.pipeline import run_pipeline

    settings = curate_settings(flow, out, source)
    overrides = [*settings.overrides, f"progress={str(settings.progress).lower()}"]
    stats = run_pipeline(settings.config, source_files(out, source), out / "curated" / source.name,
                         workers=settings.workers, overrides=overrides, overwrite=not resume)
    if not stats["output"]["documents"]:
        raise FlowError(f"source {source.name!r}: curation kept no documents")
    print(f"{source.name}: {stats['stages'][0]['counters'].get('in', 0)} records in, "
          f"{stats['output']['documents']} documents kept -> {out / 'curated' / source.name}")
    return stats


def tokenizer(flow: Flow, out: Path, shards: list[Path]) -> None:
    """Train byte-level BPE on the curated text, unless the flow names a tokenizer to use."""
    from trident.data.tokenizer import train_tokenizer

    trained = train_tokenizer(shards, vocab_size=flow.tokenizer.vocab_size,
                              out=out / "tokenizer.json", show_progress=sys.stderr.isatty())  # a log gets blank lines
    print(f"byte-level BPE, {trained.vocab_size} tokens -> {out / 'tokenizer.json'}")


def tokenizer_path(flow: Flow, out: Path) -> Path:
    """The flow's tokenizer: the starting model's own (train.from), the one it names, or the one it trains."""
    from trident.flow.start_model import continues, model_tokenizer

    if continues(flow):
        return model_tokenizer(flow, out)
    return Path(flow.tokenizer.path) if flow.tokenizer.path else out / "tokenizer.json"


def tokenize(flow: Flow, out: Path, source: Source) -> dict:
    """A source's curated (with eval.heldout: decontaminated) shards -> OUT/data/NAME.bin/.idx."""
    from trident.data.tokenize_jsonl import tokenize_files
    from trident.flow.heldout_clean import training_shards

    stats = tokenize_files(training_shards(flow, out, source), out / "data" / source.name, tokenizer_path(flow, out),
                           workers=1, progress=True)
    print(f"{source.name}: {stats['documents']} documents, {stats['tokens']:,} tokens -> {out / 'data' / source.name}")
    return stats


def _trident(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a trident command in a child process (torchrun starts from there for --nproc)."""
    done = subprocess.run([sys.executable, "-m", "trident", *args], env=dict(os.environ), **kwargs)
    if done.returncode:
        kind = StageRefused if done.returncode == 2 else FlowError  # exit 2: a mistake in its input, said above
        raise kind(f"`trident {args[0]}` failed with exit status {done.returncode}")
    return done


def train_overrides(flow: Flow, out: Path) -> list[str]:
    blend = ",".join(f"{s.weight},{out / 'data' / s.name}" for s in flow.sources)
    return [f"data.paths=[{blend}]", f"data.tokenizer={tokenizer_path(flow, out)}",
            *flow.train.overrides]


def train(flow: Flow, out: Path, resume: bool) -> None:
    """`trident train` on the blend; a killed run resumes from its newest checkpoint, a changed one starts over
    (from train.from's model when the flow continues one)."""
    from trident.checkpoint.folders import complete_checkpoints  # torch-free: this is the flow's own process
    from trident.flow.start_model import continues, start_checkpoint

    load = "auto"
    if continues(flow) and not (resume and complete_checkpoints(out / "train" / "checkpoints")):
        load = str(start_checkpoint(flow, out))
    _trident(["train", flow.train.config, *train_overrides(flow, out), f"checkpoint.load={load}",
              "--nproc", str(flow.train.nproc), "--out", str(out / "train"),
              *([] if resume else ["--overwrite"])])  # a fresh start removes only what trident train wrote


def trained(out: Path) -> bool:
    return (out / "train" / "metrics.jsonl").exists() and any((out / "train" / "checkpoints").glob("step_*"))


def evaluate(flow: Flow, out: Path, checkpoint: Path | None = None, folder: str = "eval",
             shots: list[int] | None = None) -> None:
    """`trident eval` of the trained checkpoint (or `checkpoint`) on the flow's tasks and shots ->
    OUT/eval/results.json (OUT/`folder`)."""
    settings = flow.eval
    args = ["eval", str(checkpoint or out / "train" / "checkpoints"), "--tasks", ",".join(settings.tasks),
            "--shots", ",".join(map(str, shots or settings.shots)), "--out", str(out / folder), "--overwrite",
            "--tokenizer", str(tokenizer_path(flow, out)), "--batch-size", str(settings.batch_size),
            "--fewshot-construction", settings.fewshot_construction]
    args += ["--data-dir", str(eval_data(flow, out))] if eval_data(flow, out) else []
    args += ["--limit", str(settings.limit)] if settings.limit else []
    _trident(args)


def evaluate_untrained(flow: Flow, out: Path) -> None:
    """The model as training starts it (same config, same seeded initialisation; with train.from the
    model continued, the base model), at 0 shots, so the report shows what training added ->
    OUT/eval-untrained/results.json."""
    from trident.flow.start_model import continues, start_checkpoint

    if continues(flow):
        return evaluate(flow, out, start_checkpoint(flow, out), "eval-untrained", [0])
    _evaluate_initialised(flow, out)


def _evaluate_initialised(flow: Flow, out: Path) -> None:
    from trident.config import load_config
    from trident.data.tokenizer import Tokenizer
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import trident_lm
    from trident.model.gpt import build_model

    config = load_config(flow.train.config, train_overrides(flow, out))
    tokenizer = Tokenizer.load(tokenizer_path(flow, out))
    config.model.vocab_size = tokenizer.vocab_size
    model = build_model(config.model, config.model.padded_vocab_size(1), config.train.seed).eval()
    lm = trident_lm(model, tokenizer, config.model.seq_length, batch_size=flow.eval.batch_size)
    run_evaluation(lm, flow.eval.tasks, [0], eval_data(flow, out), out / "eval-untrained",
                   limit=flow.eval.limit or None, progress=False)


def sample(flow: Flow, out: Path) -> dict:
    """A continuation of the flow's prompt from the trained model, for the report."""
    from trident.checkpoint.reader import load_for_inference
    from trident.data.tokenizer import Tokenizer
    from trident.infer.generate import generate
    from trident.model.gpt import count_parameters

    model, _, _ = load_for_inference(out / "train" / "checkpoints")
    prompt = flow.sample.prompt
    text = generate(model, Tokenizer.load(tokenizer_path(flow, out)), prompt,
                    max_new_tokens=flow.sample.max_new_tokens, temperature=0.8, top_k=40, seed=flow.sample.seed)
    print(prompt + text)
    return {"prompt": prompt, "sample": prompt + text, "parameters": count_parameters(model)}


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def training_run(folder: str | Path) -> str:
    """The training run in `folder` (for `trident data which`): the folder itself when it is one (its
    config.yaml), a flow's output folder's OUT/train, or a ConfigError naming the folder to give."""
    from trident.config import ConfigError

    path = Path(folder)
    if "://" in str(folder) or (path / "config.yaml").exists():
        return str(folder)
    train = path / "train"
    if (train / "config.yaml").exists():
        return str(train)
    if (path / ".flow").is_dir():
        raise ConfigError(f"{folder} is a flow's output folder whose train stage has not written "
                          f"{train / 'config.yaml'}: run the flow through training, then give {train}")
    raise ConfigError(f"{folder} holds no training run (no config.yaml): give a `trident train --out` folder, "
                      f"or a `trident run --out` folder (its run is OUT/train)")


def stage_files(flow: Flow, out: Path, name: str) -> tuple[list[Path], list[Path]]:
    """(the files stage `name` reads, the files it writes), whose digests its stamp keeps (flow/stamp.py)."""
    from trident.flow.checks import heldout_source, holds_out_itself
    from trident.flow.heldout_clean import curated_shards, documents_file, folder, training_shards

    kind, _, source_name = name.partition(":")
    source = next((s for s in flow.sources if s.name == source_name), None)
    tokenizer, checkpoints = [tokenizer_path(flow, out)], [out / "train" / "checkpoints"]
    datasets = [out / "data" / f"{s.name}.{ext}" for s in flow.sources for ext in ("bin", "idx")]
    if kind == "inputs":
        return [], [generated_file(out, source)]
    if kind == "start":  # train.from's Hugging Face folder, imported
        return [p for p in Path(flow.train.from_).iterdir() if p.is_file()], [out / "start"]
    if kind == "heldout":
        held = heldout_source(flow)
        return (source_files(out, held) if holds_out_itself(held) else curated_shards(out, held),
                [out / "eval_data", documents_file(out)])
    if kind == "curate":
        return source_files(out, source), curated_shards(out, source)
    if kind == "decontaminate":
        return curated_shards(out, source) + [documents_file(out)], training_shards(flow, out, source)
    if kind == "tokenizer":
        shards = [p for s in flow.sources for p in training_shards(flow, out, s)]
        return (tokenizer, []) if flow.tokenizer.path else (shards, tokenizer)
    if kind == "tokenize":
        dataset = [out / "data" / f"{source.name}.{ext}" for ext in ("bin", "idx")]
        return training_shards(flow, out, source) + tokenizer, dataset
    if kind == "train":
        return datasets + tokenizer, checkpoints
    evaluation = [Path(p) for p in [eval_data(flow, out)] if p is not None]
    if name == "eval:untrained":
        return tokenizer + evaluation, [out / "eval-untrained" / "results.json"]
    if kind == "eval":
        return checkpoints + tokenizer + evaluation, [out / "eval" / "results.json"]
    stats = [p for s in flow.sources for p in (out / "curated" / s.name / "stats.json", folder(out, s) / "stats.json")]
    return ([out / "train" / "metrics.jsonl", out / "eval" / "results.json", out / "eval-untrained" / "results.json",
             *datasets, *stats], [out / "report.md"])
