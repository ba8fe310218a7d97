"""Stage base classes, and register_stage filling the registry (looked up in run/registry.py).

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

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

from trident.curate.document import CurateError, Document
from trident.text.storage import location

REGISTRY: dict[str, type["Stage"]] = {}  # filled by @register_stage as each stage module is imported


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
    (trident.curate.read.read_task.read_raw_documents), so every document is decoded once, not twice; its
    ``inputs`` are those tasks' outputs, which exist once that map is done."""

    reads_raw = False
    raw_reads: list[dict] | None = None  # set by the runner before run(); None: inputs exist already
    # set by the runner: a later phase reads the outputs and they are never published, so they are
    # written at the faster work level (trident.curate.read.shards.output_level)
    work_outputs = False

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
        existing = REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise CurateError(f"stage name {name!r} registered twice ({existing.__module__}, {cls.__module__})")
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return decorate
