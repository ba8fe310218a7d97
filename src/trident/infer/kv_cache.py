"""A batched KV cache with one slot per sequence, so sequences of different lengths share a forward
pass and a sequence can join or leave the batch between any two tokens (continuous batching).

Each layer's keys and values live in [slots, heads, length, head_dim] buffers (heads: this TP rank's
heads, so the cache is TP-sharded as the attention is; each head's [length, head_dim] is contiguous,
so a batch of slots is read without reordering). A forward pass names its rows' slots and
every token's absolute position ([b, s]); `attend` writes the new keys and values at those positions
and lets each query see the keys of its own slot at positions <= its own. Padding tokens (right of a
shorter row) are written at positions past the row's end: they are never attended, and the row's
next real token overwrites them before any query could see them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class StepRows:
    """What one forward pass is about: which slots, and each token's absolute position. Built from the
    plan's host tensors, so what the host must know (the longest row, whether the slots are
    consecutive) is read there: a decode step never waits for the device to learn it."""

    def __init__(self, slots: torch.Tensor, positions: torch.Tensor, device: torch.device | str = "cpu"):
        slots, positions = slots.cpu(), positions.cpu()  # the plan's own (a no-op for them)
        self.length = int(positions.max()) + 1  # keys at positions >= length are never attended
        first = int(slots[0])
        # consecutive slots (one request, or a batch admitted together) are read as a view, not a copy
        consecutive = torch.equal(slots, torch.arange(first, first + len(slots)))
        self.block = slice(first, first + len(slots)) if consecutive else None
        self.slots = slots.to(device, non_blocking=True)  # [b] long
        self.positions = positions.to(device, non_blocking=True)  # [b, s] long
        self.visible = (torch.arange(self.length, device=device)[None, None, :]
                        <= self.positions[:, :, None])[:, None]  # [b, 1, s, length]: shared by every layer


class LayerCache:
    """One layer's slots. `step` is shared by every layer of a model: the engine sets it per pass."""

    def __init__(self, slots: int, max_length: int, holder: "SlotCache"):
        self.slots, self.max_length, self.holder = slots, max_length, holder
        self.k = self.v = None

    def _reserve(self, k: torch.Tensor, length: int) -> None:
        """Grow the buffers (doubling, up to max_length) so positions < length fit."""
        have = 0 if self.k is None else self.k.shape[2]
        if length <= have:
            return
        size = min(self.max_length, max(length, 2 * have, 16))
        heads, dim = k.shape[1], k.shape[3]
        fresh = [k.new_zeros(self.slots, heads, size, dim) for _ in range(2)]
        if self.k is not None:
            fresh[0][:, :, :have], fresh[1][:, :, :have] = self.k, self.v
        self.k, self.v = fresh

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v [b, heads, s, d] -> attention output [b, heads, s, d] over each row's cached keys."""
        step = self.holder.step
        slots, positions, length = step.slots, step.positions, step.length
        self._reserve(k, length)
        rows = slots[:, None].expand_as(positions)
        self.k[rows, :, positions] = k.transpose(1, 2).to(self.k.dtype)  # [b, s, heads, d] at (slot, position)
        self.v[rows, :, positions] = v.transpose(1, 2).to(self.v.dtype)
        rows_read = step.block if step.block is not None else slots
        keys, values = self.k[rows_read, :, :length], self.v[rows_read, :, :length]  # [b, heads, length, d]
        b, heads, _, dim = q.shape
        group = heads // keys.shape[1]  # grouped-query attention: query head i reads key/value head i // group
        if q.shape[2] == 1:  # one new token a row: two batched matmuls beat SDPA's masked path on CPU
            grouped = q.reshape(b, keys.shape[1], group, dim)  # each key/value head's queries side by side
            scores = (grouped.float() @ keys.float().transpose(-1, -2)) * dim ** -0.5
            weights = scores.masked_fill(~step.visible, float("-inf")).softmax(-1)
            return (weights @ values.float()).to(q.dtype).reshape(b, heads, 1, dim)
        gqa = {"enable_gqa": True} if group > 1 else {}
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=step.visible, **gqa)


class SlotCache:
    """The caches of one model chunk's layers (a list, as GPT.forward's `cache` takes it)."""

    def __init__(self, num_layers: int, slots: int, max_length: int):
        self.slots, self.max_length = slots, max_length
        self.step: StepRows | None = None
        self.layers = [LayerCache(slots, max_length, self) for _ in range(num_layers)]

    def bytes(self) -> int:
        return sum(2 * layer.k.numel() * layer.k.element_size() for layer in self.layers if layer.k is not None)
