"""The model's attention and token positions under its layout: what model/gpt.py calls instead of
reaching into tensor or context parallelism itself.

Without context parallelism (`tp.cp.size` 1) attention is torch's scaled_dot_product_attention over
the rank's whole sequence and positions run 0, 1, ...; with it each rank holds two load-balanced chunks
of every sequence (parallel/context_chunks.py), attention is the ring over the CP group
(parallel/context.py) and positions are the chunks' global ones (learned tables and RoPE read them).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from trident.parallel.context import ring_attention
from trident.parallel.context_chunks import rank_positions
from trident.parallel.tp_context import TPContext
from trident.parallel.tp_random import tp_split_rng


def self_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tp: TPContext, *, causal: bool = True,
                   dropout: float = 0.0, enable_gqa: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over q, k, v [b, heads, s, d] of this rank's heads (TP) and tokens (CP)."""
    if tp.cp.size > 1:
        if dropout > 0:  # config refuses it (parallel.cp with model.attention_dropout): no masks in the ring
            raise ValueError("ring attention has no attention dropout")
        return ring_attention(q, k, v, tp.cp.group, causal=causal, enable_gqa=enable_gqa)
    gqa = {"enable_gqa": True} if enable_gqa else {}  # query head i reads key/value head i // group
    with tp_split_rng(tp, q.device, active=dropout > 0):  # heads are split across TP
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal, **gqa)


def sequence_positions(local_length: int, offset: int, tp: TPContext, device=None) -> torch.Tensor:
    """Global positions [local_length] of this rank's tokens of a sequence starting at `offset`: offset,
    offset + 1, ... without CP; with it the positions of this CP rank's two chunks (r and 2N-1-r)."""
    if tp.cp.size == 1:
        return torch.arange(offset, offset + local_length, device=device)
    return rank_positions(local_length * tp.cp.size, tp.cp.size, tp.cp.rank).to(device) + offset

