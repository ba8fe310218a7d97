"""Mixed precision: autocast for bf16/fp16 compute, and the dynamic loss scaler fp16 needs.

An overflow (inf/nan gradient or loss) on any rank is agreed on by every rank, so the step is
skipped everywhere and the weights never see it."""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.distributed as dist

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device: torch.device):
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


def found_overflow(grads: list[torch.Tensor], loss: torch.Tensor, group=None) -> bool:
    """inf/nan in any of these gradients or the loss on any rank of `group` (None: the world)."""
    flag = torch.zeros(1, device=loss.device)
    if not torch.isfinite(loss).all() or any(not torch.isfinite(g).all() for g in grads if g.numel()):
        flag.fill_(1.0)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item() > 0)


class LossScaler:
    """Dynamic loss scaling (Megatron/DeepSpeed style): back off by `backoff` after `hysteresis`
    overflows, grow by 2x after `growth_interval` clean steps. A constant 1.0 when disabled."""

    def __init__(self, enabled: bool, initial: float = 2.0**16, growth_interval: int = 1000,
                 backoff: float = 0.5, hysteresis: int = 2, min_scale: float = 1.0):
        self.enabled = enabled
        self.scale = initial if enabled else 1.0
        self.growth_interval, self.backoff, self.hysteresis = growth_interval, backoff, hysteresis
        self.min_scale = min_scale
        self.clean_steps = 0
        self.hysteresis_left = hysteresis

    def update(self, overflow: bool) -> None:
        if not self.enabled:
            return
        if overflow:
            self.clean_steps = 0
            self.hysteresis_left -= 1
            if self.hysteresis_left <= 0:
                self.scale = max(self.min_scale, self.scale * self.backoff)
        else:
            self.clean_steps += 1
            if self.clean_steps % self.growth_interval == 0:
                self.scale *= 2.0
                self.hysteresis_left = self.hysteresis

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean_steps": self.clean_steps, "hysteresis_left": self.hysteresis_left}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self.clean_steps = int(state["clean_steps"])
        self.hysteresis_left = int(state["hysteresis_left"])
