"""The pipeline schedule registry: each schedule's record (config/pipeline_schedules.py: name, chunk
rule, weight-gradient split, memory, config check) with the function that builds its instruction
lists and its bubble formula. The executor, the simulator's callers, the trainer and the diagram
command find a schedule here by name; config validation and the planner read the records alone
(they sit below trident.parallel).

Every builder takes (pp, num_microbatches, virtual_stages, slack), `slack` being the contract's
micro-batches of slack (overlap.schedule_for): 1F1B spends it on extra warm-up forwards, the
zero-bubble schedules on micro-batches in flight; GPipe and interleaved 1F1B take none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from trident.config.pipeline_schedules import GPIPE, INTERLEAVED, ONE_F_ONE_B, ZB_H1, ZB_H2, ScheduleSpec, spec
from trident.parallel.pipeline.schedules import (Instruction, ScheduleError, gpipe, interleaved_1f1b, one_f_one_b,
                                                 theoretical_bubble)
from trident.parallel.pipeline.zero_bubble import zero_bubble, zero_bubble_theory

Builder = Callable[[int, int, int, int], list[list[Instruction]]]  # (pp, m, virtual_stages, slack) -> lists


@dataclass(frozen=True)
class Schedule:
    """One pipeline schedule: its rules, its builder and its bubble at uniform costs (f = B = W for
    zero-bubble schedules), the fraction Timeline.bubble_fraction measures."""
    spec: ScheduleSpec
    build: Builder
    bubble: Callable[[int, int, int], float]  # (pp, m, virtual_stages) -> idle time over compute time
    bubble_formula: str  # how the diagram command prints it

    @property
    def name(self) -> str:
        return self.spec.name


def _zero_bubble(rules: ScheduleSpec) -> Schedule:
    return Schedule(rules, lambda pp, m, v, slack: zero_bubble(rules.name, pp, m, slack),
                    lambda pp, m, v: zero_bubble_theory(pp, m), "(pp-1)/(3m), f = B = W")


SCHEDULES: dict[str, Schedule] = {entry.name: entry for entry in (
    Schedule(GPIPE, lambda pp, m, v, slack: gpipe(pp, m), theoretical_bubble, "(pp-1)/(m*v)"),
    Schedule(ONE_F_ONE_B, lambda pp, m, v, slack: one_f_one_b(pp, m, slack), theoretical_bubble, "(pp-1)/(m*v)"),
    Schedule(INTERLEAVED, lambda pp, m, v, slack: interleaved_1f1b(pp, m, v), theoretical_bubble, "(pp-1)/(m*v)"),
    _zero_bubble(ZB_H1),
    _zero_bubble(ZB_H2),
)}


def schedule(name: str) -> Schedule:
    """The registered schedule `name`; ScheduleError lists the known names."""
    return SCHEDULES[spec(name).name]


def build_schedule(name: str, pp: int, num_microbatches: int, virtual_stages: int = 1,
                   slack: int = 0) -> list[list[Instruction]]:
    """Each stage's instruction list of schedule `name` (the batched contract's at slack 0)."""
    entry = schedule(name)
    if entry.spec.chunks(virtual_stages) != virtual_stages:
        raise ScheduleError(f"schedule {name!r} runs one chunk per stage; virtual_stages={virtual_stages} "
                            f"needs schedule {INTERLEAVED.name!r}")
    return entry.build(pp, num_microbatches, virtual_stages, slack)
