"""Rotary position embeddings (RoPE, Su et al. 2021) as Llama and transformers' Llama apply them.

Each query/key head vector is split in halves (x1, x2) and pair i of (x1_i, x2_i) is rotated by the
angle position * theta^(-2i/d): the "rotate half" convention of transformers' LlamaForCausalLM, so
trident's query/key weights are Hugging Face's unpermuted. Positions are absolute token indices
[b, s] (or [1, s] shared by the batch); angles are computed in fp32 and applied in the heads' dtype.
"""
from __future__ import annotations

import torch


def inverse_frequencies(head_dim: int, theta: float, device=None) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))


def rotary_angles(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """(cos, sin), each [b, 1, s, head_dim], for positions [b, s]."""
    freqs = positions.float()[..., None] * inverse_frequencies(head_dim, theta, positions.device)
    angles = torch.cat([freqs, freqs], dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float):
    """q [b, hq, s, d] and k [b, hk, s, d] rotated by their positions [b or 1, s]."""
    cos, sin = rotary_angles(positions, q.shape[-1], theta, q.dtype)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
