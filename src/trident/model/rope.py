"""Rotary position embeddings (RoPE, Su et al. 2021) as Llama and transformers' Llama apply them.

Each query/key head vector is split in halves (x1, x2) and pair i of (x1_i, x2_i) is rotated by the
angle position * theta^(-2i/d): the "rotate half" convention of transformers' LlamaForCausalLM, so
trident's query/key weights are Hugging Face's unpermuted. Positions are absolute token indices
[b, s] (or [1, s] shared by the batch); angles are computed in fp32 and applied in the heads' dtype.

Scaled frequencies (model.rope_scaling), as transformers computes them: `linear` divides every
frequency by the factor (position interpolation, Chen et al. 2023); `llama3` (Llama 3.1+) divides
the low frequencies (wavelength above original_max_positions / low_freq_factor) by the factor,
keeps the high ones (wavelength below original_max_positions / high_freq_factor) and interpolates
smoothly between the two.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Rotary:
    """The rotary settings of model.rope_* keys."""
    theta: float = 10000.0
    scaling: str = "none"  # none | linear | llama3
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    @classmethod
    def of(cls, cfg) -> "Rotary":
        return cls(cfg.rope_theta, cfg.rope_scaling, cfg.rope_scaling_factor, cfg.rope_low_freq_factor,
                   cfg.rope_high_freq_factor, cfg.rope_original_max_positions)


def inverse_frequencies(head_dim: int, rotary: Rotary, device=None) -> torch.Tensor:
    steps = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float()
    inv_freq = 1.0 / (rotary.theta ** (steps / head_dim))
    if rotary.scaling == "linear":
        return inv_freq / rotary.factor
    if rotary.scaling == "llama3":
        return _llama3_frequencies(inv_freq, rotary)
    return inv_freq


def _llama3_frequencies(inv_freq: torch.Tensor, r: Rotary) -> torch.Tensor:
    low_freq_wavelen = r.original_max_positions / r.low_freq_factor
    high_freq_wavelen = r.original_max_positions / r.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq)
    smooth = (r.original_max_positions / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor)
    smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotary_angles(positions: torch.Tensor, head_dim: int, rotary: Rotary, dtype: torch.dtype):
    """(cos, sin), each [b, 1, s, head_dim], for positions [b, s]."""
    freqs = positions.float()[..., None] * inverse_frequencies(head_dim, rotary, positions.device)
    angles = torch.cat([freqs, freqs], dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, rotary: Rotary):
    """q [b, hq, s, d] and k [b, hk, s, d] rotated by their positions [b or 1, s]."""
    cos, sin = rotary_angles(positions, q.shape[-1], rotary, q.dtype)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
