"""Few-shot examples: which solved examples precede a scored one, drawn reproducibly.

The pool is the task's first available few-shot split (train, else validation), else the scored
split itself. Two constructions, named by `FEWSHOT_CONSTRUCTIONS`:

- "harness" (the default): lm-evaluation-harness v0.4's exact construction, so few-shot numbers are
  comparable with published harness numbers. One `random.Random(seed)` stream per task and shot
  count, drawn document after document in order (`rng.sample(pool, k)`). When the harness hands its
  sampler the scored document (tasks whose harness config has no test split: `Task.harness_excludes
  _scored_doc`), k + 1 are drawn, every example equal to the scored document is removed and the first
  k kept (if fewer than k remain, k are drawn again from the pool without it). Examples are written
  as the harness writes them: `Task.harness_shot` (text + target delimiter + target).
- "per-document" (trident's earlier construction): each document's examples are
  `random.Random(f"{seed}/{task}/{doc_index}").sample(pool, k)`; when the pool is the scored split,
  k + 1 are drawn and the scored document dropped. A document's prompt is then the same whatever
  --limit is used; examples are written by `Task.fewshot_example`.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from trident.tasks.base import Task
from trident.tasks.files import TaskDataError

FEWSHOT_CONSTRUCTIONS = ("harness", "per-document")


@dataclass
class FewShotPool:
    split: str
    docs: list[dict]
    is_eval_split: bool


def load_pool(task: Task, data_dir: Path | None, eval_docs: list[dict]) -> FewShotPool:
    """The documents few-shot examples are drawn from, and the split they came from."""
    for split in task.fewshot_splits:
        if task.has_split(data_dir, split):
            return FewShotPool(split, task.load(data_dir, split), False)
    return FewShotPool(task.eval_split, eval_docs, True)


def draw(pool: FewShotPool, k: int, seed: int, task_name: str, doc_index: int) -> list[int]:
    """Per-document construction: indices into pool.docs of the k examples for document doc_index."""
    if k == 0:
        return []
    _check_size(pool, k, task_name, 1 if pool.is_eval_split else 0)
    rng = random.Random(f"{seed}/{task_name}/{doc_index}")
    if not pool.is_eval_split:
        return rng.sample(range(len(pool.docs)), k)
    drawn = rng.sample(range(len(pool.docs)), k + 1)
    return [i for i in drawn if i != doc_index][:k]


def draw_harness(pool: FewShotPool, k: int, rng: random.Random, scored: dict | None) -> list[int]:
    """Harness construction: the next k examples of the task's one stream `rng`; scored (the scored
    document, or None when the harness does not pass it to its sampler) is never among them."""
    if k == 0:
        return []
    everything = range(len(pool.docs))
    if scored is None:
        return rng.sample(everything, k)
    kept = [i for i in rng.sample(everything, k + 1) if pool.docs[i] != scored][:k]
    if len(kept) < k:  # the pool held the scored document more than once: draw again without it
        kept = rng.sample([i for i in everything if pool.docs[i] != scored], k)
    return kept


def harness_indices(task: Task, pool: FewShotPool, k: int, seed: int, docs: list[dict]) -> list[list[int]]:
    """Harness construction for every scored document of docs, in order, from one stream."""
    if k == 0:
        return [[] for _ in docs]
    _check_size(pool, k, task.name, 1 if task.harness_excludes_scored_doc else 0)
    rng = random.Random(seed)
    return [draw_harness(pool, k, rng, doc if task.harness_excludes_scored_doc else None) for doc in docs]


def all_indices(task: Task, pool: FewShotPool, k: int, seed: int, docs: list[dict], construction: str) -> list[list[int]]:
    """The examples of every scored document, by the named construction."""
    if construction == "harness":
        return harness_indices(task, pool, k, seed, docs)
    if construction == "per-document":
        return [draw(pool, k, seed, task.name, i) for i in range(len(docs))]
    raise ValueError(f"unknown few-shot construction {construction!r}; known: {', '.join(FEWSHOT_CONSTRUCTIONS)}")


def prefix(task: Task, pool: FewShotPool, indices: list[int], construction: str = "per-document") -> str:
    """The few-shot part of the prompt: solved examples, each followed by the few-shot delimiter."""
    shot = task.harness_shot if construction == "harness" else task.fewshot_example
    return "".join(shot(pool.docs[i]) + task.fewshot_delimiter for i in indices)


def describe(task: Task, pool: FewShotPool, seed: int, construction: str) -> str:
    """How the examples were drawn, for results.json."""
    if construction == "harness":
        excluded = "; examples equal to the scored document removed" if task.harness_excludes_scored_doc else ""
        return f"lm-evaluation-harness: random.Random({seed}).sample(pool, k) per document in order{excluded}"
    excluded = "; the scored example excluded" if pool.is_eval_split else ""
    return f"per-document: random.Random('{seed}/{task.name}/<doc_index>').sample(pool, k), in drawn order{excluded}"


def shortfall(task: Task, pool: FewShotPool, k: int, construction: str) -> str | None:
    """Why `k` examples cannot be drawn for every scored document of task from pool; None when they can."""
    if k == 0:
        return None
    reserved = reserved_examples(task, pool, construction)
    if len(pool.docs) - reserved >= k:
        return None
    source = f"its {pool.split} split" if pool.split else "no few-shot split"
    extra = " + 1 (the scored example is never its own example)" if reserved else ""
    return (f"{task.name} {k}-shot: needs {k}{extra} few-shot examples but {source} holds {len(pool.docs)}; "
            f"give the task a larger {'/'.join(task.fewshot_splits) or task.eval_split} split or use fewer shots")


def reserved_examples(task: Task, pool: FewShotPool, construction: str) -> int:
    """1 when the construction draws k + 1 and removes the scored document, else 0."""
    if construction == "harness":
        return 1 if task.harness_excludes_scored_doc else 0
    return 1 if pool.is_eval_split else 0


def _check_size(pool: FewShotPool, k: int, task_name: str, reserved: int) -> None:
    available = len(pool.docs) - reserved  # the harness draws k + 1 when it removes the scored document
    if available < k:
        raise TaskDataError(f"{task_name}: {k}-shot needs {k} examples but the {pool.split} split "
                            f"offers only {available}")
