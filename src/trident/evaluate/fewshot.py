"""Few-shot examples: which solved examples precede a scored one, drawn reproducibly.

The pool is the task's first available few-shot split (train, else validation), else the scored
split itself. For each scored document the examples are `random.Random(f"{seed}/{task}/{doc_index}")
.sample(pool, k)`, in the order drawn; when the pool is the scored split, k + 1 are drawn and the
scored document is dropped, so it never appears in its own prompt. Seeding per document keeps a
document's prompt the same whatever --limit or batch size is used.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from trident.tasks.base import Task
from trident.tasks.files import TaskDataError


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
    """Indices into pool.docs of the k examples for document doc_index, in prompt order."""
    if k == 0:
        return []
    available = len(pool.docs) - (1 if pool.is_eval_split else 0)
    if available < k:
        raise TaskDataError(f"{task_name}: {k}-shot needs {k} examples but the {pool.split} split "
                            f"offers only {available}")
    rng = random.Random(f"{seed}/{task_name}/{doc_index}")
    if not pool.is_eval_split:
        return rng.sample(range(len(pool.docs)), k)
    drawn = rng.sample(range(len(pool.docs)), k + 1)
    return [i for i in drawn if i != doc_index][:k]


def prefix(task: Task, pool: FewShotPool, indices: list[int]) -> str:
    """The few-shot part of the prompt: solved examples, each followed by the few-shot delimiter."""
    return "".join(task.fewshot_example(pool.docs[i]) + task.fewshot_delimiter for i in indices)
