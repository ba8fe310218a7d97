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


def ring_attention_bytes(kv_numel: float, element_size: int, cp: int) -> tuple[float, float]:
    """(forward, backward) bytes one CP rank sends per ring-attention call (parallel/context.py), for one
    K block of `kv_numel` elements of `element_size` bytes: K/V pass N-1 hops each way, fp32 dK/dV pass
    N hops (nothing on a ring of one). The ring counts these (RING_TRAFFIC); the planner prices them."""
    kv = 2 * kv_numel * element_size
    return (cp - 1) * kv, (cp - 1) * kv + (cp * 2 * kv_numel * 4 if cp > 1 else 0)


def zero_in_effect(zero_stage: int, gradient_group: int) -> int:
    """The ZeRO stage in effect: ZeRO shards (optimizer state; gradients too from stage 2; parameters
    too at stage 3) only across more than one rank of the gradient group (dp x cp, the ranks holding
    the same parameters), so it is 0 with dp x cp = 1."""
    return zero_stage if gradient_group > 1 else 0


@lru_cache(maxsize=4096)
def stage_layer_counts(num_layers: int, pp: int, virtual_stages: int = 1,
                       partition: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Transformer layers on each pipeline rank (chunk i sits on rank i % pp). A `partition` that was
    written for another pp x virtual_stages does not apply: the layers are then balanced."""
    fits = partition is not None and len(partition) == pp * virtual_stages
    stages = partition_layers(num_layers, pp, virtual_stages, list(partition) if fits else None)
    return tuple(sum(len(chunk) for chunk in chunks) for chunks in stages)


# ZeRO stages 2 and 3: gradient reduce-scatters in flight before the oldest is waited for (parallel/data.py;
# each holds its bucket's fp32 staging buffer and 1/G output: the bound on that memory the planner counts)
REDUCTIONS_IN_FLIGHT = 2


def dp_bytes_per_step(stage: int, dp: int, elements: int, param_bytes: int, micro_batches: int,
                      grad_bytes: int = 4, shard: int = 0) -> int:
    """Bytes one rank sends in a step's data-parallel collectives under ring algorithms (a collective
    over B bytes sends (dp - 1)/dp x B from each rank, an all-reduce twice that), for a flat buffer of
    `elements` (N: every bucket padded to a multiple of dp) of e = `param_bytes`-byte weights with
    g = `grad_bytes`-byte gradients (trident's: fp32, 4) and m = `micro_batches` per step
    (docs/training.md, "ZeRO stages"):
      stage 0  all-reduce of the gradients                                2 (dp-1)/dp x g N
      stage 1  reduce-scatter of the gradients, all-gather of the weights    (dp-1)/dp x (g + e) N
      stage 2  a reduce-scatter per micro-batch, all-gather of the weights   (dp-1)/dp x (m g + e) N
      stage 3  per micro-batch a reduce-scatter and two all-gathers
               (before the forward, again before the backward)               (dp-1)/dp x m (g + 2e) N
    Hybrid sharding (stages 1-3, `shard` = K < dp, parallel/hybrid.py): the same collectives inside
    a shard group of K, (K-1)/K in place of (dp-1)/dp (N padded to a multiple of K), plus one
    all-reduce of the owned 1/K across the R = dp/K replicas           + 2 (R-1)/R x g N / K"""
    if dp <= 1:
        return 0
    g, e, m = grad_bytes, param_bytes, micro_batches
    per_element = {0: 2 * g, 1: g + e, 2: m * g + e, 3: m * (g + 2 * e)}[stage]
    k = shard if stage and shard else dp
    replicas = dp // k
    return elements * (k - 1) // k * per_element + 2 * (elements // k) * g * (replicas - 1) // replicas
