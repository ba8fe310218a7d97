"""The flow file: what to read, how to curate, tokenize, train and evaluate it."""
from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class FlowError(ValueError):
    """A flow file that cannot run: a missing key, an input that matches no file, a bad weight."""


class FlowKeyError(FlowError):
    """A key no flow file has: a configuration mistake (`trident run` exits 2)."""


GENERATORS = ("stdlib-docstrings", "sample-warc")  # inputs a flow can make itself (trident.flow.inputs)
# every key a flow file may hold, by section (`trident run --help` prints this; anything else is refused)
KEYS = {
    "sources": ("name", "paths", "path", "weight", "generate", "curate", "decontaminate"),
    "curate": ("config", "overrides", "workers", "progress"),
    "tokenizer": ("path", "vocab_size"),
    "train": ("config", "overrides", "nproc"),
    "eval": ("tasks", "shots", "data_dir", "heldout", "limit", "batch_size", "untrained", "fewshot_construction"),
    "sample": ("prompt", "max_new_tokens", "seed"),
}


def check_keys(raw: dict, where: str) -> None:
    """FlowError naming the file and the first key no flow file has (a typo would otherwise pass silently)."""
    if not isinstance(raw, dict):
        raise FlowKeyError(f"{where}: a flow file is a mapping of {', '.join(KEYS)}")
    for section, value in raw.items():
        if section not in KEYS:
            raise FlowKeyError(f"{where}: unknown key {section!r} (a flow file has {', '.join(KEYS)})")
        entries = value if section == "sources" and isinstance(value, list) else [value]
        for entry in entries:
            unknown = [k for k in (entry or {}) if k not in KEYS[section]] if isinstance(entry, dict) else []
            if unknown:
                raise FlowKeyError(f"{where}: unknown key '{section}.{unknown[0]}' (known: {', '.join(KEYS[section])})")


@dataclass
class Source:
    """One input of the blend. `files` are the user's; a source with `generate` has none until its
    inputs stage writes them under OUT/inputs/. `curate` holds per-source curation settings (merged over
    the flow's); `decontaminate` adds decontamination against the flow's evaluation files."""
    name: str
    files: list[Path]
    weight: float
    generate: dict | None = None
    curate: dict = field(default_factory=dict)
    decontaminate: bool = False


@dataclass
class Flow:
    """A parsed flow file; relative paths are resolved against the flow file's folder."""
    sources: list[Source]
    curate: dict = field(default_factory=dict)  # config (preset or YAML), overrides, workers
    tokenizer: dict = field(default_factory=dict)  # path (use it) or vocab_size (train one)
    train: dict = field(default_factory=dict)  # config, overrides, nproc
    eval: dict = field(default_factory=dict)  # tasks, shots, data_dir | heldout, limit, batch_size, untrained
    sample: dict = field(default_factory=dict)  # prompt, max_new_tokens, seed


def _resolve(base: Path, text: str) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def _files(base: Path, patterns: list[str], name: str) -> list[Path]:
    files = []
    for pattern in patterns:
        matched = sorted(Path(p) for p in glob.glob(str(_resolve(base, pattern)), recursive=True))
        if not matched:
            raise FlowError(f"source {name!r}: {pattern!r} matches no file")
        files += [p for p in matched if p.is_file()]
    return files


def _sources(base: Path, entries) -> list[Source]:
    if not entries:
        raise FlowError("the flow file needs 'sources:' (name, paths, weight per source)")
    sources = []
    for i, entry in enumerate(entries):
        name = str(entry.get("name", f"source{i}"))
        weight = float(entry.get("weight", 1.0))
        if weight <= 0:
            raise FlowError(f"source {name!r}: weight must be > 0, got {weight}")
        extra = {"curate": dict(entry.get("curate") or {}), "decontaminate": bool(entry.get("decontaminate", False))}
        if entry.get("generate"):
            sources.append(Source(name, [], weight, generate=_generator(name, entry["generate"]), **extra))
            continue
        paths = entry.get("paths") or entry.get("path")
        if not paths:
            raise FlowError(f"source {name!r}: give 'paths:' (files or globs) or 'generate:' ({', '.join(GENERATORS)})")
        files = _files(base, [paths] if isinstance(paths, str) else list(paths), name)
        sources.append(Source(name, files, weight, **extra))
    if len({s.name for s in sources}) < len(sources):
        raise FlowError("source names must be distinct")
    return sources


def _generator(name: str, settings) -> dict:
    settings = {"kind": settings} if isinstance(settings, str) else dict(settings)
    if settings.get("kind") not in GENERATORS:
        raise FlowError(f"source {name!r}: generate.kind must be one of {', '.join(GENERATORS)}, "
                        f"got {settings.get('kind')!r}")
    return settings


def _check_heldout(evaluation: dict, sources: list[Source]) -> None:
    heldout = evaluation.get("heldout")
    if heldout is None:
        return
    source = next((s for s in sources if s.name == heldout.get("source")), None)
    if source is None or not (source.generate or {}).get("holdout_every"):
        raise FlowError(f"eval.heldout.source must name a generated source with generate.holdout_every, "
                        f"got {heldout.get('source')!r}")
    if evaluation.get("data_dir"):
        raise FlowError("eval: give either data_dir or heldout, not both")


def load_flow(path: str | Path, raw: dict | None = None) -> Flow:
    """Parse and check a flow file, or its already-parsed `raw` content (FlowError on anything that
    would fail later). Relative paths resolve against the flow file's folder."""
    path = Path(path)
    if raw is None:
        if not path.is_file():
            raise FlowError(f"{path}: no such flow file")
        raw = yaml.safe_load(path.read_text()) or {}
    check_keys(raw, str(path))
    base = path.resolve().parent
    tokenizer = dict(raw.get("tokenizer") or {"vocab_size": 2048})
    if "path" in tokenizer:
        tokenizer["path"] = str(_resolve(base, tokenizer["path"]))
    evaluation = dict(raw.get("eval") or {})
    if evaluation.get("data_dir"):
        evaluation["data_dir"] = str(_resolve(base, evaluation["data_dir"]))
    train = dict(raw.get("train") or {})
    config = str(train.get("config", "tiny"))
    if config.endswith((".yaml", ".yml")):
        train["config"] = str(_resolve(base, config))
    curate = dict(raw.get("curate") or {})
    if str(curate.get("config", "")).endswith((".yaml", ".yml")):
        curate["config"] = str(_resolve(base, curate["config"]))
    sources = _sources(base, raw.get("sources"))
    _check_heldout(evaluation, sources)
    return Flow(sources, curate, tokenizer, train, evaluation, dict(raw.get("sample") or {}))
