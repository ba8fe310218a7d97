"""The training config's `eval` section: downstream tasks scored during training on the training
mesh (trident/train/downstream.py), and its checks."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvalConfig:
    tasks: list[str] = field(default_factory=list)  # task names as `trident eval --tasks`; []: none
    interval: int = 0  # steps between downstream evaluations; 0: never
    shots: list[int] = field(default_factory=lambda: [0])  # shot counts scored for every task
    limit: int = 0  # score the first N documents of each task; 0: all of them
    data_dir: str = ""  # folder with the tasks' published files; "": the Hugging Face hub
    batch_size: int = 8  # rows per forward pass
    seed: int = 1234  # few-shot draw seed, as `trident eval --seed`


def eval_problem(e: EvalConfig) -> tuple[str, str] | None:
    """(config key, what is wrong) for the first problem of the section, or None."""
    for key, value, low in (("interval", e.interval, 0), ("limit", e.limit, 0), ("batch_size", e.batch_size, 1)):
        if value < low:
            return f"eval.{key}", f"must be >= {low}, got {value}"
    if not all(isinstance(t, str) and t for t in e.tasks):
        return "eval.tasks", f"must be a list of task names, got {e.tasks}"
    if not (e.shots and all(type(k) is int and k >= 0 for k in e.shots)):
        return "eval.shots", f"must be a non-empty list of shot counts >= 0, got {e.shots}"
    if bool(e.tasks) != (e.interval > 0):
        return ("eval.interval" if e.tasks else "eval.tasks",
                "eval.tasks and eval.interval > 0 go together (scored every interval steps): set both or neither")
    return None
