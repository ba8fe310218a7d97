"""The flow file: what to read, how to curate, tokenize, train and evaluate it.

Its keys and defaults are trident.config.flow's dataclasses; load_flow fills them (unknown keys
and wrong values refused naming the key and the file), resolves paths and globs, and checks every
stage's settings (trident.flow.checks) before any stage runs.
"""
from __future__ import annotations

import glob
from pathlib import Path

from trident.config import ConfigError
from trident.config.flow import GENERATORS, NAME, FlowConfig, GenerateSection
from trident.config.typed import fill, read_yaml
from trident.flow.checks import check_flow
from trident.flow.parsed import Flow, FlowConfigError, FlowError, Source, StageRefused  # noqa: F401 (public here too)
from trident.text.storage import require_local


def _resolve(base: Path, text: str) -> Path:
    require_local(text, "flow file path", "the flow engine runs its stages in local folders; `trident curate`, "
                                          "`tokenize`, `train` and `eval` take URLs")
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def _files(base: Path, patterns: list[str], name: str, index: int) -> list[Path]:
    """The files each pattern matches; one that matches none is a mistake in the flow file (exit 2 before
    any stage), not a stage's failure."""
    files = []
    for pattern in patterns:
        resolved = _resolve(base, pattern)
        matched = [p for p in sorted(Path(p) for p in glob.glob(str(resolved), recursive=True)) if p.is_file()]
        if not matched:
            raise FlowConfigError(f"sources[{index}].paths: source {name!r}: glob {pattern!r} matches no file "
                                  f"(looked for {resolved})")
        files += matched
    return files


def _config_path(base: Path, config):
    """A YAML file named relative to the flow file, resolved; a preset name or inline mapping as given."""
    return str(_resolve(base, config)) if isinstance(config, str) and config.endswith((".yaml", ".yml")) else config


def _sources(base: Path, config: FlowConfig) -> list[Source]:
    if not config.sources:
        raise FlowConfigError("the flow file needs 'sources:' (name, paths, weight per source)")
    sources = []
    for i, entry in enumerate(config.sources):
        name = entry.name or f"source{i}"
        generate = entry.generate
        if isinstance(generate, str):  # `generate: KIND` is short for `generate: {kind: KIND}`
            generate = fill(GenerateSection(), {"kind": generate}, f"sources[{i}].generate.", NAME)
        if generate is not None and not generate.kind:
            raise FlowConfigError(f"{NAME} key 'sources[{i}].generate.kind': give one of {', '.join(GENERATORS)}")
        entry.curate.config = _config_path(base, entry.curate.config)
        patterns = [entry.paths] if isinstance(entry.paths, str) else list(entry.paths)
        patterns += [entry.path] if entry.path else []
        if generate is None and not patterns:
            raise FlowConfigError(f"source {name!r}: give 'paths:' (files or globs) or 'generate:' "
                                  f"({', '.join(GENERATORS)})")
        files = [] if generate else _files(base, patterns, name, i)
        sources.append(Source(name, files, entry.weight, generate, entry.curate, entry.decontaminate))
    if len({s.name for s in sources}) < len(sources):
        raise FlowConfigError("source names must be distinct")
    return sources


def load_flow(path: str | Path, raw: dict | None = None) -> Flow:
    """Parse and check a flow file, or its already-parsed `raw` content (FlowError on anything that
    would fail later; FlowConfigError, naming the file, on a mistake in it). Relative paths resolve
    against the flow file's folder."""
    path = Path(path)
    try:
        if raw is None and not path.is_file():
            raise FlowError(f"{path}: no such flow file")
        raw = read_yaml(path) if raw is None else raw
        if not isinstance(raw, dict):
            raise ConfigError(f"a flow file is a mapping of {', '.join(FlowConfig.__dataclass_fields__)}")
        if "eval" in raw and raw["eval"] in (None, "none"):  # `eval: none`: no evaluation stage
            raw = {**raw, "eval": {"tasks": []}}
        config = fill(FlowConfig(), raw, name=NAME)
        return _flow(path.resolve().parent, config)
    except FlowError as error:
        if isinstance(error, FlowConfigError):
            raise FlowConfigError(f"{path}: {error}") from None
        raise
    except ConfigError as error:
        raise FlowConfigError(f"{path}: {error}") from None


def _flow(base: Path, config: FlowConfig) -> Flow:
    if config.tokenizer.path:
        config.tokenizer.path = str(_resolve(base, config.tokenizer.path))
    if config.eval.data_dir:
        config.eval.data_dir = str(_resolve(base, config.eval.data_dir))
    if config.train.from_:
        config.train.from_ = str(_resolve(base, config.train.from_))
    config.train.config = _config_path(base, config.train.config or ("continue" if config.train.from_ else "tiny"))
    config.curate.config = _config_path(base, config.curate.config)
    flow = Flow(_sources(base, config), config.curate, config.tokenizer, config.train, config.eval, config.sample)
    check_flow(flow)  # every stage's settings now, not after the stages before it ran
    return flow
