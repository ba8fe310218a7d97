"""Stage base classes and the stage registry.

A *streaming* stage sees one document at a time (`process(docs) -> docs`); consecutive streaming
stages are fused into one pass over each shard. A *global* stage needs all the data at once
(dedup, decontamination): it reads the current shard files and writes new ones.

Counter conventions (a `collections.Counter` on every stage; stats.json shows them as-is):
  "in", "out"                  documents entering / leaving the stage
  "dropped:<reason>"           documents removed, by reason; in == out + sum(dropped:*) is checked
  "bytes_in", "bytes_out"      UTF-8 bytes of text entering / leaving
  "hist:<name>:<bin>"          histogram bins (e.g. hist:quality_score:07, hist:cluster_size:3),
                               drawn as charts in report.md; ignored by the accounting
  anything else                informational (e.g. "changed:ftfy", "lines_removed:javascript")
"""
from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

from trident.curate.document import CurateError, Document
from trident.text.storage import location

# Modules whose import registers stages; imported on first lookup so each can be developed alone.
STAGE_MODULES = (
    "trident.curate.extract",
    "trident.curate.clean",
    "trident.curate.langid",
    "trident.curate.site_lines",
    "trident.curate.filters",
    "trident.curate.quality",
    "trident.curate.dedup",
    "trident.curate.fuzzy_dedup",
    "trident.curate.minhash",
    "trident.curate.decontaminate",
    "trident.curate.holdout",
)
# The built-in stages' modules: a pipeline imports only those of its own stages (all of them cost
# ~0.3 s of CPU, ftfy and the extractors mostly); a test checks this against the registrations.
BUILTIN_STAGES = {
    "extract": "trident.curate.extract", "clean": "trident.curate.clean", "langid": "trident.curate.langid",
    "site_lines": "trident.curate.site_lines", "min_length": "trident.curate.filters",
    "gopher_quality": "trident.curate.filters", "gopher_repetition": "trident.curate.filters",
    "c4_lines": "trident.curate.filters", "quality": "trident.curate.quality", "exact_dedup": "trident.curate.dedup",
    "fuzzy_dedup": "trident.curate.fuzzy_dedup", "decontaminate": "trident.curate.decontaminate",
    "holdout": "trident.curate.holdout",
}

_REGISTRY: dict[str, type["Stage"]] = {}


class Executor(Protocol):
    """What a global stage may use to run work in parallel (local processes or Ray tasks)."""

    workers: int

    def map(self, fn: Callable[[Any], Any], items: list, desc: str | None = None) -> list:
        """[fn(x) for x in items], possibly in parallel; results in input order. fn must be a
        module-level function and items picklable (they cross process boundaries)."""
        ...


class Stage:
    """Base of all stages: a registry `name`, the keyword parameters it was built with, counters."""

    name: str = ""
    worker_modules: tuple[str, ...] = ()  # imported inside its tasks: worker processes load them at start

    def __init__(self, **params: Any) -> None:
        self.params = params
        self.counters: Counter = Counter()
        self.drops = None  # the task's curate.droplog.DropLog, set by the runner (None: not logged)

    def setup(self) -> None:
        """Load heavy resources (models); called once in the process that does the work."""


class StreamingStage(Stage):
    """A per-document stage. Subclasses implement `apply` (or override `process`)."""

    score_key: str | None = None  # the meta key of a score-based filter's score, logged with its drops

    def apply(self, doc: Document) -> Document | str:
        """Return the (possibly changed) document to keep it, or a reason string to drop it."""
        raise TypeError(f"stage '{type(self).__name__}' must define apply() or override process()")

    def process(self, docs: Iterable[Document]) -> Iterator[Document]:
        """Yield kept documents; count every document in, out, and dropped by reason."""
        for doc in docs:
            self.counters["in"] += 1
            self.counters["bytes_in"] += doc.nbytes
            result = self.apply(doc)
            if isinstance(result, str):
                self.drop(doc, result)
                continue
            self.counters["out"] += 1
            self.counters["bytes_out"] += result.nbytes
            yield result


    def drop(self, doc: Document, reason: str) -> None:
        """Count `doc` as dropped for `reason` and write it to the drop log (with its score, if any)."""
        self.counters[f"dropped:{reason}"] += 1
        if self.drops is not None:
            score = {"score": doc.meta[self.score_key]} if self.score_key in doc.meta else {}
            self.drops.add(doc.id, str(doc.meta.get("url", "")), self.name, reason, **score)


class GlobalStage(Stage):
    """A stage that needs every document (dedup, decontamination).

    One that declares ``reads_raw`` may be handed, as ``raw_reads``, the read tasks of the pipeline's
    read phase when it is the first stage (local executor): its first map then runs each read itself
    (trident.curate.runner.read_raw_documents), so every document is decoded once, not twice; its
    ``inputs`` are those tasks' outputs, which exist once that map is done."""

    reads_raw = False
    raw_reads: list[dict] | None = None  # set by the runner before run(); None: inputs exist already

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Read the shard files `inputs` (JSONL.zst), write new shards under `out_dir`, return their
        paths, and fill `self.counters` (in/out/dropped:<reason>)."""
        raise TypeError(f"global stage '{type(self).__name__}' must define run()")


def output_paths(inputs: list[Path], out_dir: Path) -> list[Path]:
    """One output shard (JSONL.zst) per input, same file name (prefixed by its index if names collide;
    ".zst" added to a plain work shard's)."""
    names = [location(p).name if location(p).name.endswith(".zst") else location(p).name + ".zst" for p in inputs]
    clash = len(set(names)) != len(names)
    return [out_dir / (f"{i:05d}-{n}" if clash else n) for i, n in enumerate(names)]


def register_stage(name: str) -> Callable[[type[Stage]], type[Stage]]:
    """Class decorator: make a Stage subclass available to pipeline configs as `stage: name`."""

    def decorate(cls: type[Stage]) -> type[Stage]:
        if not (isinstance(cls, type) and issubclass(cls, (StreamingStage, GlobalStage))):
            raise TypeError(f"@register_stage({name!r}): {cls!r} is not a StreamingStage or GlobalStage")
        existing = _REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise CurateError(f"stage name {name!r} registered twice ({existing.__module__}, {cls.__module__})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _import_stage_modules() -> None:
    for module in STAGE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            # Only a module that does not exist yet is tolerated; a broken import inside it is not.
            if err.name != module:
                raise


def stage_class(name: str) -> type[Stage]:
    """The class registered as `name`; CurateError listing the known names otherwise."""
    if name not in _REGISTRY and name in BUILTIN_STAGES:
        importlib.import_module(BUILTIN_STAGES[name])
    if name not in _REGISTRY:
        _import_stage_modules()
    if name not in _REGISTRY:
        raise CurateError(f"unknown stage {name!r}; known stages: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def registered_stages() -> dict[str, type[Stage]]:
    """All registered stages by name (imports the built-in stage modules)."""
    _import_stage_modules()
    return dict(_REGISTRY)


def build_stage(name: str, params: dict[str, Any]) -> Stage:
    """Instantiate a registered stage; unknown or missing parameters raise CurateError naming them."""
    cls = stage_class(name)
    signature = inspect.signature(cls.__init__)
    accepted = [p for p in signature.parameters.values() if p.name != "self"]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted)
    allowed = {p.name for p in accepted if p.kind is not inspect.Parameter.VAR_KEYWORD}
    unknown = sorted(set(params) - allowed)
    if unknown and not takes_any:
        raise CurateError(f"stage {name!r}: unknown parameter(s) {unknown}; allowed: {sorted(allowed)}")
    _check_param_types(name, cls, params)
    try:
        return cls(**params)
    except (TypeError, ValueError) as err:
        raise CurateError(f"stage {name!r}: {err}") from err


_SCALARS = (bool, int, float, str, type(None))


def _check_param_types(name: str, cls: type, params: dict[str, Any]) -> None:
    """Parameters annotated with plain scalar types (int, float, bool, str, optional) get a value of
    that type (an int is a float too) or null, else CurateError naming the stage and the parameter."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - annotations that do not resolve are simply not checked
        return
    for key, value in params.items():
        hint = hints.get(key)
        kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        # containers, custom types, unannotated parameters and null (the stage's own "missing") are not checked
        if value is None or not all(kind in _SCALARS for kind in kinds):
            continue
        if not any(_is_kind(value, kind) for kind in kinds):
            wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)
            raise CurateError(f"stage {name!r}: parameter '{key}' must be {wanted}, got {value!r}")


def _is_kind(value: Any, kind: type) -> bool:
    if kind is float:
        return type(value) in (int, float)
    return type(value) is kind
