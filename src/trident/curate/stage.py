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
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

from trident.curate.document import CurateError, Document

# Modules whose import registers stages; imported on first lookup so each can be developed alone.
STAGE_MODULES = (
    "trident.curate.extract",
    "trident.curate.clean",
    "trident.curate.langid",
    "trident.curate.filters",
    "trident.curate.quality",
    "trident.curate.dedup",
    "trident.curate.fuzzy_dedup",
    "trident.curate.minhash",
    "trident.curate.decontaminate",
)

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

    def __init__(self, **params: Any) -> None:
        self.params = params
        self.counters: Counter = Counter()

    def setup(self) -> None:
        """Load heavy resources (models); called once in the process that does the work."""


class StreamingStage(Stage):
    """A per-document stage. Subclasses implement `apply` (or override `process`)."""

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
                self.counters[f"dropped:{result}"] += 1
                continue
            self.counters["out"] += 1
            self.counters["bytes_out"] += result.nbytes
            yield result


class GlobalStage(Stage):
    """A stage that needs every document (dedup, decontamination)."""

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Read the shard files `inputs` (JSONL.zst), write new shards under `out_dir`, return their
        paths, and fill `self.counters` (in/out/dropped:<reason>)."""
        raise TypeError(f"global stage '{type(self).__name__}' must define run()")


def output_paths(inputs: list[Path], out_dir: Path) -> list[Path]:
    """One output shard per input, same file name (prefixed by its index if names collide)."""
    names = [Path(p).name for p in inputs]
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
    try:
        return cls(**params)
    except (TypeError, ValueError) as err:
        raise CurateError(f"stage {name!r}: {err}") from err
