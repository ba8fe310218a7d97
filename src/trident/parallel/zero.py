"""AdamW over the flat buffers of trident.parallel.data, with ZeRO-1 sharding over DP.

Each rank updates only the flat ranges it owns (all of them without ZeRO, 1/dp of each bucket with
ZeRO-1), keeping for those ranges the fp32 master weights (a separate copy only when the model
trains in bf16/fp16), Adam's m and v, and per-element masks for weight decay and for counting an
element in the global gradient norm. The update is AdamW exactly as torch.optim.AdamW computes it.
"""
from __future__ import annotations

import math

import torch

from trident.parallel.data import GradBuffers


class DistributedAdam:
    def __init__(self, buffers: GradBuffers, decay: dict[int, bool], counted: dict[int, bool], lr: float,
                 betas: tuple[float, float], eps: float, weight_decay: float):
        self.buffers, self.lr, self.betas, self.eps, self.weight_decay = buffers, lr, betas, eps, weight_decay
        self.ranges = buffers.owned_ranges()
        self.separate_master = buffers.params.dtype != torch.float32
        self.master, self.exp_avg, self.exp_avg_sq, self.decay_mask, self.norm_mask = [], [], [], [], []
        for lo, hi in self.ranges:
            params = buffers.params[lo:hi]
            self.master.append(params.float().clone() if self.separate_master else params)
            self.exp_avg.append(torch.zeros(hi - lo, device=params.device))
            self.exp_avg_sq.append(torch.zeros(hi - lo, device=params.device))
            self.decay_mask.append(self._mask(lo, hi, decay))
            self.norm_mask.append(self._mask(lo, hi, counted))
        self.steps = 0

    def _mask(self, lo: int, hi: int, flags: dict[int, bool]) -> torch.Tensor:
        """Per owned element: the flag of the parameter it belongs to (padding: False)."""
        mask = torch.zeros(hi - lo, dtype=torch.bool, device=self.buffers.grads.device)
        for _, param in self.buffers.named_params:
            start, end = self.buffers.param_range(param)
            a, b = max(start, lo), min(end, hi)
            if a < b and flags[id(param)]:
                mask[a - lo:b - lo] = True
        return mask

    def grads(self) -> list[torch.Tensor]:
        return [self.buffers.grads[lo:hi] for lo, hi in self.ranges]

    def state_bytes(self) -> int:
        """Bytes this rank holds for the optimizer: fp32 master (if separate), m, v and the masks."""
        tensors = self.exp_avg + self.exp_avg_sq + self.decay_mask + self.norm_mask
        tensors += self.master if self.separate_master else []
        return sum(t.numel() * t.element_size() for t in tensors)

    def grad_norm_squared(self) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float32, device=self.buffers.grads.device)
        for grad, mask in zip(self.grads(), self.norm_mask):
            total += grad.masked_select(mask).float().pow(2).sum() if grad.numel() else 0.0
        return total

    @torch.no_grad()
    def step(self, lr: float) -> None:
        """One AdamW update of the owned ranges (gradients already reduced, unscaled and clipped)."""
        self.steps += 1
        beta1, beta2 = self.betas
        bias1, bias2 = 1 - beta1**self.steps, 1 - beta2**self.steps
        for master, grad, m, v, decay in zip(self.master, self.grads(), self.exp_avg, self.exp_avg_sq,
                                             self.decay_mask):
            if master.numel() == 0:
                continue
            master.mul_(torch.where(decay, 1 - lr * self.weight_decay, 1.0))
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (v.sqrt() / math.sqrt(bias2)).add_(self.eps)
            master.addcdiv_(m, denom, value=-lr / bias1)
        if self.separate_master:
            for (lo, hi), master in zip(self.ranges, self.master):
                self.buffers.params[lo:hi].copy_(master)
        self.buffers.gather_params()

