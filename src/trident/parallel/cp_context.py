"""Which context-parallel group a layer belongs to: the ring its attention runs over (parallel/context.py)
and which load-balanced chunks of each sequence its rank holds (parallel/context_chunks.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CPContext:
    """A context-parallel group. size 1: the whole sequence on this rank, no ring."""

    group: Any = None
    size: int = 1
    rank: int = 0

    def __post_init__(self):
        if self.size > 1 and self.group is None:
            raise ValueError(f"CPContext(size={self.size}) needs a process group")
        if not 0 <= self.rank < self.size:
            raise ValueError(f"CPContext rank {self.rank} outside group of size {self.size}")


NO_CP = CPContext()
