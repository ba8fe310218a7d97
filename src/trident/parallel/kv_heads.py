"""The key/value projection of grouped-query attention (Ainslie et al. 2023) under tensor parallelism.

Query heads are split across TP ranks as usual. Key/value heads (rows ordered (kv head, k|v,
head_dim), so a contiguous slice holds whole heads) are:
  * sharded like any column-parallel weight when tp divides their number;
  * replicated when their number divides tp (fewer kv heads than ranks, multi-query attention
    included): every rank holds the whole weight and multiplies only the rows of the one kv head
    its query heads share. Its gradient is then partial on each rank (only that head's rows), so
    the parameter carries `partial_across_tp` and the gradient finaliser sums it across TP.
Either way the full tensor, its checkpointed form and its seeded initialisation are the same.
"""
from __future__ import annotations

import torch
from torch import nn

from trident.parallel.sharding import mark
from trident.parallel.tensor import NO_TP, TPContext, column_parallel_input
from trident.parallel.weight_grad import linear


class KeyValueLinear(nn.Module):
    """[s, b, h] -> [s, b, kv_local * 2 * head_dim]: this rank's key/value heads, rows (head, k|v, d)."""

    def __init__(self, hidden: int, kv_heads: int, head_dim: int, bias: bool = True, tp: TPContext = NO_TP,
                 device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.tp, self.in_features = tp, hidden
        self.sharded = kv_heads % tp.size == 0
        if not self.sharded and tp.size % kv_heads:
            raise ValueError(f"{kv_heads} key/value heads cannot be spread over {tp.size} tensor-parallel ranks")
        self.kv_local = kv_heads // tp.size if self.sharded else 1
        rows = 2 * head_dim * kv_heads // (tp.size if self.sharded else 1)
        # replicated: the rows of the kv head this rank's query heads share (query heads split in rank order)
        start = 2 * head_dim * (tp.rank * kv_heads // tp.size)
        self.rows = slice(0, rows) if self.sharded else slice(start, start + 2 * head_dim)
        dim = 0 if self.sharded else None
        self.weight = mark(nn.Parameter(torch.empty(rows, hidden, **factory)), dim, tp)
        self.bias = mark(nn.Parameter(torch.zeros(rows, **factory)), dim, tp) if bias else None
        for param in self.parameters():
            param.partial_across_tp = not self.sharded and tp.size > 1

    def forward(self, x: torch.Tensor, gathered: bool = False) -> torch.Tensor:
        x = x if gathered else column_parallel_input(x, self.tp)
        if self.sharded:
            return linear(x, self.weight, self.bias)
        bias = None if self.bias is None else self.bias[self.rows]
        return linear(x, self.weight[self.rows], bias)
