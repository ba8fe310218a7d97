"""Hybrid sharding (`parallel.dp_shard=K`, HSDP / ZeRO++'s hierarchical partitioning): ZeRO shards over
groups of K members of the gradient group and replicates across its G/K groups.

The gradient group (the ranks a gradient is reduced over, G of them) is cut into shard groups of K
consecutive members, a node's worth when the members of a node are consecutive; the members with
the same place in their shard group form a replica group (G/K ranks, one per shard group). ZeRO's
collectives run inside a shard group: the gradients are reduce-scattered there (each member keeps
its 1/K of every bucket) and the weights all-gathered there; the owned slices are then all-reduced
across the replica group once a step. K = G (`dp_shard` 0) is plain ZeRO: no replica group.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist


@dataclass(frozen=True)
class Replicas:
    """The copies of this rank's shard: the replica group, their number, this rank's place among them."""
    group: Any = None  # a ProcessGroup, or None with one copy
    count: int = 1
    rank: int = 0


NO_REPLICAS = Replicas()


def hybrid_group_ranks(gradient_groups: list[list[int]], shard: int) -> dict[str, list[list[int]]]:
    """Shard groups (`shard` consecutive members of each gradient group) and replica groups (the
    members at the same place in every shard group of one gradient group), as lists of global ranks."""
    shards = [ranks[i:i + shard] for ranks in gradient_groups for i in range(0, len(ranks), shard)]
    replicas = [ranks[j::shard] for ranks in gradient_groups for j in range(shard)]
    return {"dp_shard": shards, "dp_replica": replicas}


def add_hybrid_groups(mesh, gradient_groups: list[list[int]], shard: int, timeout: timedelta | None) -> None:
    """Create the shard and replica groups of `gradient_groups` (collective over the world: every rank
    creates every group, in the same order) and keep this rank's in `mesh.groups`; nothing when K = G."""
    size = len(gradient_groups[0])
    if shard in (0, size):
        return
    if shard < 0 or size % shard:
        raise ValueError(f"parallel.dp_shard={shard} does not divide the gradient group's {size} ranks (dp x cp)")
    for kind, all_ranks in hybrid_group_ranks(gradient_groups, shard).items():
        for ranks in all_ranks:
            group = (dist.new_group(ranks, timeout=timeout, group_desc=f"{kind} group (ranks {ranks})")
                     if len(ranks) > 1 else None)
            if mesh.rank in ranks:
                mesh.groups[kind] = group
    mesh.dp_shard = shard


def zero_groups(mesh, stage: int, gradient: tuple[Any, int, int]) -> tuple[Any, int, int, Replicas]:
    """(group, size, this rank's place) that ZeRO stage `stage` shards over, and the Replicas its
    owned gradient slices are all-reduced across, from `gradient`: (group, size, place) of the group
    the gradients are reduced over (the one add_hybrid_groups cut). Stage 0 shards nothing: all of it."""
    group, size, place = gradient
    shard = mesh.dp_shard or size
    if stage == 0 or shard == size:
        return group, size, place, NO_REPLICAS
    replicas = Replicas(mesh.group("dp_replica"), size // shard, place // shard)
    return mesh.group("dp_shard"), shard, place % shard, replicas
