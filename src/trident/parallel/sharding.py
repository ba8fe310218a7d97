"""How a full tensor maps to one tensor-parallel rank's slice of it.

A sharded parameter carries `tp_dim` (the dimension split across TP ranks, None when replicated),
`tp_size` and `tp_rank`; rank r holds the r-th of tp_size equal blocks along tp_dim. Initialisation
and checkpoints use these helpers to go between a rank's shard and the full tensor.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from trident.parallel.tp_context import TPContext


def mark(param: nn.Parameter, tp_dim: int | None, tp: TPContext) -> nn.Parameter:
    """Record on `param` which dimension is split over `tp` (None: replicated) and its rank."""
    param.tp_dim = tp_dim if tp.size > 1 else None
    param.tp_size, param.tp_rank = tp.size, tp.rank
    return param


def full_shape(param: nn.Parameter) -> tuple[int, ...]:
    """Shape of the unsharded tensor a (possibly TP-sharded) parameter is a slice of."""
    shape = list(param.shape)
    if getattr(param, "tp_dim", None) is not None:
        shape[param.tp_dim] *= param.tp_size
    return tuple(shape)


def shard_offsets(param: nn.Parameter) -> list[int]:
    """Where this rank's slice starts in the full tensor, per dimension."""
    offsets = [0] * param.ndim
    if getattr(param, "tp_dim", None) is not None:
        offsets[param.tp_dim] = param.tp_rank * param.shape[param.tp_dim]
    return offsets
