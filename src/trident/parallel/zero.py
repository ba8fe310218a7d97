"""AdamW over data parallelism's flat buffers (param_buffers.py, data.py), with its state sharded over
the gradient group dp x cp, or a shard group of it (ZeRO-1 and up).

Each rank updates only the flat ranges it owns (all of them without ZeRO, 1/G of each bucket at
ZeRO stage 1, 2 or 3, over G ranks: the buffers hand it the owned slices of the parameters and reduced gradients,
views of full buffers or of owned-only ones, whatever the stage), keeping for those ranges the fp32
master weights (a separate copy only when the model trains in bf16/fp16) and Adam's m and v; which
sub-ranges are decayed and which count in the global gradient norm is kept as (start, end) segments.
The update is AdamW as torch.optim.AdamW computes it, by one of two kernels, named in `optimizer.kernel`:
- "fused" on CUDA and CPU: torch's fused AdamW (`torch._fused_adamw_`, the kernel of
  AdamW(fused=True)), two calls per step over views of the flat master/grad/m/v: the decayed
  segments with weight decay, the others without. On the CPU too: with it every layout stays
  within round-off of one process and a resume is bit-exact (the test suite checks both), and it
  is faster than "foreach" (docs/benchmarks.md);
- "foreach" on any other device: the same arithmetic in a few foreach/elementwise ops per range.
"""
from __future__ import annotations

import math

import torch

from trident.parallel.data import GradBuffers
from trident.parallel.param_buffers import ParamBuffers

FUSED_DEVICES = ("cuda", "cpu")  # device types whose fused AdamW kernel is used (and tested)


class DistributedAdam:
    def __init__(self, params: ParamBuffers, grads: GradBuffers, decay: dict[int, bool], counted: dict[int, bool],
                 lr: float, betas: tuple[float, float], eps: float, weight_decay: float, fused: bool | None = None):
        self.param_buffers, self.grad_buffers, self.layout = params, grads, params.layout
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.ranges = self.layout.owned_ranges()
        weights = params.params
        self.separate_master = weights.dtype != torch.float32
        self.master, self.exp_avg, self.exp_avg_sq, self.decay_segments, self.norm_segments = [], [], [], [], []
        for (lo, hi), owned in zip(self.ranges, self.param_buffers.owned_param_views):
            self.master.append(owned.float().clone() if self.separate_master else owned)
            self.exp_avg.append(torch.zeros(hi - lo, device=owned.device))
            self.exp_avg_sq.append(torch.zeros(hi - lo, device=owned.device))
            self.decay_segments.append(self._segments(lo, hi, decay))
            self.norm_segments.append(self._segments(lo, hi, counted))
        plain = {key: not flag for key, flag in decay.items()}
        self.plain_segments = [self._segments(lo, hi, plain) for lo, hi in self.ranges]  # not decayed
        if fused is None:
            fused = weights.device.type in FUSED_DEVICES
        self.kernel = "fused" if fused else "foreach"
        # The fused kernel reads the step count from a tensor (on the parameters' device).
        self.step_tensor = torch.zeros((), dtype=torch.float32, device=weights.device)
        self.steps = 0

    def _segments(self, lo: int, hi: int, flags: dict[int, bool]) -> list[tuple[int, int]]:
        """Maximal runs of the owned range [lo, hi) whose parameters have the flag (range-relative)."""
        runs: list[tuple[int, int]] = []
        for _, param in self.layout.named_params:
            start, end = self.layout.param_range(param)
            a, b = max(start, lo) - lo, min(end, hi) - lo
            if a < b and flags[id(param)]:
                if runs and runs[-1][1] == a:
                    runs[-1] = (runs[-1][0], b)  # adjacent parameters: one longer run
                else:
                    runs.append((a, b))
        return runs

    def grads(self) -> list[torch.Tensor]:
        return self.grad_buffers.owned_grad_views

    def state_bytes(self) -> int:
        """Bytes this rank holds for the optimizer: fp32 master (if separate), m and v."""
        tensors = self.exp_avg + self.exp_avg_sq + (self.master if self.separate_master else [])
        return sum(t.numel() * t.element_size() for t in tensors)

    def grad_norm_squared(self) -> torch.Tensor:
        """Sum of squares of the counted owned gradients (inf/nan if any of them is)."""
        views = [grad[a:b] for grad, runs in zip(self.grads(), self.norm_segments) for a, b in runs]
        if not views:
            return torch.zeros((), dtype=torch.float32, device=self.grad_buffers.grads.device)
        return torch.stack(torch._foreach_norm(views)).float().pow(2).sum()

    @torch.no_grad()
    def step(self, lr: float) -> None:
        """One AdamW update of the owned ranges (gradients already reduced, unscaled and clipped)."""
        self.steps += 1
        if self.kernel == "fused":
            self._fused_step(lr)
        else:
            self._foreach_step(lr)
        if self.separate_master:
            for params, master in zip(self.param_buffers.owned_param_views, self.master):
                params.copy_(master)
        self.param_buffers.gather_params()

    def _fused_step(self, lr: float) -> None:
        """torch._fused_adamw_ over the decayed segments (with weight decay) and the others (without)."""
        self.step_tensor.fill_(self.steps)
        beta1, beta2 = self.betas
        grads = self.grads()
        for segments, weight_decay in ((self.decay_segments, self.weight_decay), (self.plain_segments, 0.0)):
            views = [[tensor[a:b] for tensor, runs in zip(tensors, segments) for a, b in runs]
                     for tensors in (self.master, grads, self.exp_avg, self.exp_avg_sq)]
            if views[0]:
                torch._fused_adamw_(*views, [], [self.step_tensor] * len(views[0]), lr=lr, beta1=beta1,
                                    beta2=beta2, weight_decay=weight_decay, eps=self.eps, amsgrad=False,
                                    maximize=False)

    def _foreach_step(self, lr: float) -> None:
        """The same update as torch.optim.AdamW's, in foreach/elementwise ops per owned range."""
        beta1, beta2 = self.betas
        bias1, bias2 = 1 - beta1**self.steps, 1 - beta2**self.steps
        decayed = [master[a:b] for master, runs in zip(self.master, self.decay_segments) for a, b in runs]
        if decayed and self.weight_decay:
            torch._foreach_mul_(decayed, 1 - lr * self.weight_decay)
        for master, grad, m, v in zip(self.master, self.grads(), self.exp_avg, self.exp_avg_sq):
            if master.numel() == 0:
                continue
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (v.sqrt() / math.sqrt(bias2)).add_(self.eps)
            master.addcdiv_(m, denom, value=-lr / bias1)
