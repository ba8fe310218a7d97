"""The pipeline schedules as data: one record per schedule, the only place that spells their names.

Pure and at the config layer (no torch, no trident.parallel), so that config validation and the
planner read the same rules as the pipeline package; parallel/pipeline/registry.py attaches to each
record the function that builds its instruction lists and its bubble formula. A record holds:
- the chunk rule: an interleaved schedule runs `virtual_stages` model chunks per rank, any other one;
- whether it splits weight gradients (zero-bubble: BackwardWeight apart from the input gradient);
- its memory: micro-batches a stage holds at the peak under batched exchanges (the planner's);
- its check: what a run's pipeline shape (pp, virtual stages, micro-batches per replica) must meet.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from trident.config.suggest import did_you_mean


class ScheduleError(ValueError):
    """A schedule or its arguments are invalid; the message names the stage and instruction."""


@dataclass(frozen=True)
class Problem:
    """One rule a run breaks: the config key to name and what it needs."""
    key: str
    message: str


@dataclass(frozen=True)
class ScheduleSpec:
    """One pipeline schedule's rules (module docstring)."""
    name: str
    interleaved: bool = False  # virtual_stages chunks per rank; micro-batches a multiple of pp
    splits_weight_grads: bool = False  # zero-bubble: needs the weight gradients outside a recomputed forward
    holds_every_micro_batch: bool = False  # GPipe: every forward's activations live until the backwards
    # pp -> micro-batches a stage holds beyond 1F1B's pp - stage, before the contract's slack (ZB-H2: pp - 1)
    extra_inflight: Callable[[int], int] = lambda pp: 0

    def chunks(self, virtual_stages: int) -> int:
        """Model chunks per rank."""
        return virtual_stages if self.interleaved else 1

    def in_flight(self, pp: int, stage: int, micro: int, virtual_stages: int) -> float:
        """Activation sets `stage` holds at the peak, in whole-stage units (interleaved: Megatron's
        warm-up (pp - stage - 1) * 2 + (v - 1) * pp chunk-micro-batches plus the one in flight)."""
        if self.holds_every_micro_batch:
            return float(micro)
        if virtual_stages > 1:
            chunks = min((pp - stage - 1) * 2 + (virtual_stages - 1) * pp + 1, micro * virtual_stages)
            return chunks / virtual_stages
        return float(min(pp - stage + self.extra_inflight(pp), micro))

    def micro_batch_problem(self, pp: int, micro_batches: tuple[int, ...]) -> Problem | None:
        """Interleaved schedules walk micro-batches in groups of pp (Megatron's rule)."""
        if not self.interleaved or pp == 1 or all(m % pp == 0 for m in micro_batches):
            return None
        return Problem("parallel.schedule", f"{self.name} schedule needs micro-batches per replica "
                                            f"({', '.join(map(str, micro_batches))}) to be a multiple of pp={pp}")

    def check(self, pp: int, virtual_stages: int, micro_batches: tuple[int, ...] = ()) -> list[Problem]:
        """What a run of pp stages, `virtual_stages` chunks and these micro-batch counts per replica
        and step (one per batch size the run takes) breaks; empty when it can run."""
        problems = []
        if virtual_stages > 1 and not self.interleaved:
            problems.append(Problem("parallel.schedule", f"virtual_stages > 1 needs schedule={INTERLEAVED.name}"))
        elif virtual_stages > 1 and pp < 2:
            problems.append(Problem("parallel.virtual_stages", "interleaving (virtual_stages > 1) needs pp >= 2"))
        micro = self.micro_batch_problem(pp, micro_batches)
        return problems + ([micro] if micro else [])

    def checkpointing_problem(self, activation_checkpointing: str) -> Problem | None:
        """Deferred weight gradients live outside the forward that full recomputation reruns."""
        if self.splits_weight_grads and activation_checkpointing == "full":
            return Problem("train.activation_checkpointing", f"schedule={self.name} defers weight gradients "
                                                             f"past the backward; use none or selective")
        return None


GPIPE = ScheduleSpec("gpipe", holds_every_micro_batch=True)
ONE_F_ONE_B = ScheduleSpec("1f1b")
INTERLEAVED = ScheduleSpec("interleaved", interleaved=True)
ZB_H1 = ScheduleSpec("zb-h1", splits_weight_grads=True)
ZB_H2 = ScheduleSpec("zb-h2", splits_weight_grads=True, extra_inflight=lambda pp: pp - 1)
SPECS: dict[str, ScheduleSpec] = {spec.name: spec for spec in (GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_H2)}
DEFAULT_SCHEDULE = ONE_F_ONE_B.name


def spec(name: str) -> ScheduleSpec:
    """The record of schedule `name`; ScheduleError names the known ones."""
    if name not in SPECS:
        raise ScheduleError(f"unknown pipeline schedule {name!r}{did_you_mean(name, SPECS)}; "
                            f"choose one of {', '.join(SPECS)}")
    return SPECS[name]


def searched_schedule(name: str, virtual_stages: int) -> str:
    """The schedule the planner's search costs for config schedule `name` at `virtual_stages` chunks:
    interleaved above one chunk; else the config's GPipe / 1F1B choice, every 1F1B variant as 1F1B."""
    if virtual_stages > 1:
        return INTERLEAVED.name
    return GPIPE.name if name == GPIPE.name else ONE_F_ONE_B.name
