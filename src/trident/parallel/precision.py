"""Mixed precision: autocast for bf16/fp16 compute, and the dynamic loss scaler fp16 needs.

The trainer skips a step on every rank when the global gradient norm or the loss is inf/nan
(every rank computes the same norm), so the weights never see an overflow."""
from __future__ import annotations

from contextlib import nullcontext

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device: torch.device):
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


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
