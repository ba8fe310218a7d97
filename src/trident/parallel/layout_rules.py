"""The rules that turn a layout's raw keys into what is in effect, in one place and without torch:
a rank's RankLayout (parallel/layout.py) and the planner's candidate layouts (plan/memory.py) both
derive their values here, so `trident plan` sizes the layout the trainer builds.
"""
from __future__ import annotations

from functools import lru_cache

from trident.parallel.pipeline.schedules import partition_layers


def sequence_split(tp: int, sequence_parallel: bool) -> int:
    """How many parts sequence parallelism cuts the activations' sequence into (1: not in effect,
    which it never is without tensor parallelism)."""
    return tp if sequence_parallel and tp > 1 else 1


def zero_in_effect(zero_stage: int, dp: int) -> int:
    """The ZeRO stage in effect: ZeRO shards (optimizer state; gradients too from stage 2; parameters
    too at stage 3) only across more than one data-parallel replica, so it is 0 with dp = 1."""
    return zero_stage if dp > 1 else 0


@lru_cache(maxsize=4096)
def stage_layer_counts(num_layers: int, pp: int, virtual_stages: int = 1,
                       partition: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Transformer layers on each pipeline rank (chunk i sits on rank i % pp). A `partition` that was
    written for another pp x virtual_stages does not apply: the layers are then balanced."""
    fits = partition is not None and len(partition) == pp * virtual_stages
    stages = partition_layers(num_layers, pp, virtual_stages, list(partition) if fits else None)
    return tuple(sum(len(chunk) for chunk in chunks) for chunks in stages)
