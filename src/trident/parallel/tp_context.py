"""Which tensor-parallel group a layer belongs to: the one object every TP layer, the sharding
helpers and the TP RNG streams take (below all of them). It also carries the layer's context-parallel
group (`cp`), so attention finds its ring without the model knowing of ranks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from trident.parallel.cp_context import NO_CP, CPContext


@dataclass(frozen=True)
class TPContext:
    """Which tensor-parallel group a layer belongs to. size 1 means no communication at all."""

    group: Any = None
    size: int = 1
    rank: int = 0
    sequence_parallel: bool = False
    rng: Any = field(default=None, compare=False)  # the model's TPRandomState (split-region dropout)
    cp: CPContext = NO_CP  # the context-parallel group attention's ring runs over (parallel/attention.py)

    def __post_init__(self):
        if self.size > 1 and self.group is None:
            raise ValueError(f"TPContext(size={self.size}) needs a process group")
        if not 0 <= self.rank < self.size:
            raise ValueError(f"TPContext rank {self.rank} outside group of size {self.size}")
        if self.group is not None and dist.get_world_size(self.group) != self.size:
            raise ValueError(f"TPContext size {self.size} != process group size {dist.get_world_size(self.group)}")


NO_TP = TPContext()
