"""The rank grid: world = dp x pp x cp x tp with TP ranks contiguous (one node), then CP, then PP, then DP.

rank = ((dp_rank * pp + pp_rank) * cp + cp_rank) * tp + tp_rank, i.e. `arange(world).view(dp, pp, cp, tp)`:
the chattiest groups (TP, then context parallelism's ring) sit on neighbouring ranks, which torchrun
places on the same node (MT-NLG's topology-aware mapping). The ranks that hold identical parameters
and reduce gradients together are dp x cp ("dp_cp": the "dp" group itself when cp = 1); "dp" keeps
meaning the ranks that read different samples. With every degree 1 no process group is created at all.
"""
from __future__ import annotations

import os
from datetime import timedelta
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from trident.config import ConfigError
from trident.parallel.cp_context import CPContext
from trident.parallel.hybrid import add_hybrid_groups
from trident.parallel.tensor import TPContext


def layout_of(mesh) -> dict[str, int]:
    """The layout record a checkpoint stores: resuming with exactly this record continues the RNG streams
    (cp only when it is in use, so a cp = 1 record is the one written before context parallelism)."""
    cp = {"cp": mesh.cp} if mesh.cp > 1 else {}
    return {"dp": mesh.dp, "pp": mesh.pp, "tp": mesh.tp} | cp | {"world_size": mesh.world_size}


def rank_grid(dp: int, pp: int, tp: int, cp: int = 1) -> torch.Tensor:
    return torch.arange(dp * pp * cp * tp).view(dp, pp, cp, tp)


def coordinates(rank: int, pp: int, tp: int, cp: int = 1) -> tuple[int, int, int, int]:
    """(dp_rank, pp_rank, cp_rank, tp_rank) of a global rank."""
    return rank // (pp * cp * tp), rank // (cp * tp) % pp, rank // tp % cp, rank % tp


def group_ranks(dp: int, pp: int, tp: int, cp: int = 1) -> dict[str, list[list[int]]]:
    """Every group of every kind, as lists of global ranks, in a fixed order all ranks agree on."""
    grid = rank_grid(dp, pp, tp, cp)
    groups = {
        "tp": grid.reshape(-1, tp).tolist(),
        "pp": grid.permute(0, 2, 3, 1).reshape(-1, pp).tolist(),
        "dp": grid.permute(1, 2, 3, 0).reshape(-1, dp).tolist(),
        "mp": grid.permute(0, 2, 1, 3).reshape(dp * cp, -1).tolist(),  # TP x PP: one model replica, for gradient norms
    }
    if cp > 1:  # with cp = 1 the CP groups are single ranks and "dp_cp" is "dp" (Mesh.group)
        groups["cp"] = grid.permute(0, 1, 3, 2).reshape(-1, cp).tolist()
        groups["dp_cp"] = grid.permute(1, 3, 0, 2).reshape(-1, dp * cp).tolist()  # dp-major, cp-minor: rank order
    # First and last stage of each pipeline share the tied word embedding; with pp=1 it is one rank.
    groups["embedding"] = [sorted({ranks[0], ranks[-1]}) for ranks in groups["pp"]]
    return groups


class GradientGroup(NamedTuple):
    """The ranks that hold the same parameters and sum their gradients (dp x cp): group, size, place."""
    group: Any
    size: int
    rank: int


@dataclass
class Mesh:
    dp: int = 1
    pp: int = 1
    tp: int = 1
    rank: int = 0
    groups: dict[str, Any] = field(default_factory=dict)  # kind -> this rank's ProcessGroup (or None)
    pipeline_ranks: list[int] = field(default_factory=lambda: [0])
    dp_shard: int = 0  # ZeRO's shard group size under hybrid sharding (parallel/hybrid.py); 0: dp x cp
    cp: int = 1  # context parallelism: each sequence split over cp ranks (parallel/context.py)

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.cp * self.tp

    @property
    def dp_rank(self) -> int:
        return coordinates(self.rank, self.pp, self.tp, self.cp)[0]

    @property
    def pp_rank(self) -> int:
        return coordinates(self.rank, self.pp, self.tp, self.cp)[1]

    @property
    def cp_rank(self) -> int:
        return coordinates(self.rank, self.pp, self.tp, self.cp)[2]

    @property
    def tp_rank(self) -> int:
        return coordinates(self.rank, self.pp, self.tp, self.cp)[3]

    @property
    def gradient(self) -> GradientGroup:
        """(group, size, this rank's place) of the ranks that hold the same parameters and sum their
        gradients: dp x cp (a CP rank saw only its chunks of each sequence)."""
        return GradientGroup(self.group("dp_cp"), self.dp * self.cp, self.dp_rank * self.cp + self.cp_rank)

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    def group(self, kind: str):
        if kind == "dp_cp" and self.cp == 1:
            kind = "dp"
        return self.groups.get(kind)

    def stage_rank(self, pp_rank: int) -> int:
        """Global rank of pipeline stage `pp_rank` in this rank's pipeline."""
        return self.pipeline_ranks[pp_rank]

    def tp_context(self, sequence_parallel: bool = False, rng=None) -> TPContext:
        """This rank's TP group for layers; `rng` is the owning model's TPRandomState (dropout)."""
        context = CPContext(self.group("cp"), self.cp, self.cp_rank)
        return TPContext(self.group("tp"), self.tp, self.tp_rank, sequence_parallel and self.tp > 1, rng, context)

    def describe(self) -> str:
        cp = f" cp {self.cp_rank}/{self.cp}" if self.cp > 1 else ""
        return (f"rank {self.rank}/{self.world_size}: dp {self.dp_rank}/{self.dp} pp {self.pp_rank}/{self.pp}{cp} "
                f"tp {self.tp_rank}/{self.tp}")


def rank_device(wanted: str = "auto") -> torch.device:
    """This rank's device: `cuda` (or `auto` on a GPU machine) is this rank's own GPU (LOCAL_RANK,
    set by torchrun); `auto` elsewhere is the CPU; anything else (`cpu`, `cuda:1`) is taken as given."""
    if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
        local, gpus = int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count()
        if local >= gpus:  # a config mistake (exit 2), not an "invalid device ordinal" from deep inside CUDA
            raise ConfigError(f"rank {os.environ.get('RANK', 0)} is local rank {local} but this machine has {gpus} "
                             f"GPU(s) (train.device={wanted}): start at most {gpus} ranks a node, or train.device=cpu")
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu" if wanted == "auto" else wanted)


def build_mesh(tp: int = 1, pp: int = 1, dp: int = 0, timeout_s: float | None = None, dp_shard: int = 0,
               cp: int = 1) -> Mesh:
    """Create the process groups of every dimension. dp=0 infers it from the world size.

    A collective or point-to-point exchange in any of them fails after `timeout_s` seconds without
    its peers (None: torch's default, 30 minutes for gloo); each group's `group_desc` names its kind
    and ranks (e.g. "tp group (ranks [0, 1])", see parallel/watch.py). `dp_shard` K < dp x cp adds
    hybrid sharding's groups: ZeRO over K consecutive ranks of the gradient group (dp x cp),
    replicated across the rest (hybrid.py). Needs torch.distributed initialised when the world has
    more than one process."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    if tp < 1 or pp < 1 or cp < 1 or dp < 0:
        raise ValueError(f"parallel degrees must be positive, got tp={tp} pp={pp} cp={cp} dp={dp}")
    model = tp * pp * cp
    if world % model:
        raise ValueError(f"world size {world} is not divisible by tp x pp x cp = {tp} x {pp} x {cp}")
    dp = dp or world // model
    if dp * model != world:
        raise ValueError(f"dp x pp x cp x tp = {dp} x {pp} x {cp} x {tp} = {dp * model} != world size {world}")
    mesh = Mesh(dp=dp, pp=pp, tp=tp, rank=rank, cp=cp)
    if world == 1:
        return mesh
    timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
    kinds = group_ranks(dp, pp, tp, cp)
    for kind, all_ranks in kinds.items():
        for ranks in all_ranks:
            # new_group is collective over the world: every rank creates every group, in the same order.
            group = (dist.new_group(ranks, timeout=timeout, group_desc=f"{kind} group (ranks {ranks})")
                     if len(ranks) > 1 else None)
            if rank in ranks:
                mesh.groups[kind] = group
                if kind == "pp":
                    mesh.pipeline_ranks = ranks
    gradient = kinds["dp_cp" if cp > 1 else "dp"]
    add_hybrid_groups(mesh, gradient, dp_shard, timeout)  # shard/replica groups of dp_shard in the gradient group
    return mesh


def barrier() -> None:
    """All ranks meet here (no-op for one process)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
