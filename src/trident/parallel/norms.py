"""The block norms with tensor/sequence parallelism: LayerNorm (GPT) and RMSNorm (Llama).

Their parameters are replicated across TP; with sequence parallelism each rank normalises only its
part of the sequence, so the weight (and bias) gradients are partial and the gradient finaliser sums
them across TP ranks (the `sequence_parallel` mark).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trident.parallel.sharding import mark
from trident.parallel.tensor import NO_TP, SequenceParallelLayerNorm, TPContext


class SequenceParallelRMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019: x / rms(x) * weight; no mean, no bias), TP-replicated as
    SequenceParallelLayerNorm. Normalised in fp32 whatever the activations' dtype, then scaled in
    theirs, as Llama (and transformers' LlamaRMSNorm) compute it."""

    def __init__(self, hidden: int, eps: float, tp: TPContext = NO_TP, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = mark(nn.Parameter(torch.ones(hidden, device=device, dtype=dtype)), None, tp)
        self.weight.sequence_parallel = tp.sequence_parallel and tp.size > 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return self.weight * normed.to(x.dtype)


def build_norm(kind: str, hidden: int, eps: float, bias: bool, tp: TPContext = NO_TP, device=None, dtype=None):
    """model.norm's layer: `layernorm` (with a bias unless model.bias is off) or `rmsnorm`."""
    if kind == "rmsnorm":
        return SequenceParallelRMSNorm(hidden, eps, tp, device=device, dtype=dtype)
    return SequenceParallelLayerNorm(hidden, eps, tp, bias=bias, device=device, dtype=dtype)
