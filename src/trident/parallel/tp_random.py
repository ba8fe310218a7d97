"""Dropout RNG under tensor parallelism: the same across TP ranks where activations are replicated,
different where they are split (Megatron's model-parallel RNG tracker). A ParallelModel owns one
TPRandomState and hands it to its layers through their TPContext (`tp.rng`); nothing is global.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from trident.parallel.tp_context import TPContext


class TPRandomState:
    """A second RNG stream, seeded differently per TP rank, used inside split regions (Megatron's
    model-parallel RNG tracker). Outside those regions the default generator, identical across TP ranks.
    A ParallelModel owns one and hands it to its layers through their TPContext."""

    def __init__(self):
        self.states: dict[str, torch.Tensor] = {}

    def seed(self, seed: int, device: torch.device | str = "cpu") -> None:
        device = torch.device(device)
        saved = _get_rng_state(device)
        torch.manual_seed(seed) if device.type == "cpu" else torch.cuda.manual_seed(seed)
        self.states[device.type] = _get_rng_state(device)
        _set_rng_state(device, saved)

    def get_states(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.states.items()}

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self.states = {k: v.clone() for k, v in states.items()}


def _get_rng_state(device: torch.device) -> torch.Tensor:
    return torch.get_rng_state() if device.type == "cpu" else torch.cuda.get_rng_state(device)


def _set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    torch.set_rng_state(state) if device.type == "cpu" else torch.cuda.set_rng_state(state, device)


class tp_split_rng:
    """Context manager: draw random numbers from the TP context's per-TP-rank stream when `active`."""

    def __init__(self, tp: TPContext, device: torch.device, active: bool = True):
        self.active = active and tp.size > 1
        self.rng, self.device = tp.rng, torch.device(device)

    def __enter__(self):
        if self.active:
            if self.rng is None or self.device.type not in self.rng.states:
                raise RuntimeError("tensor-parallel RNG not seeded: build the model with parallelize(), which "
                                   "seeds the model's TPRandomState, before training with dropout")
            self.saved = _get_rng_state(self.device)
            _set_rng_state(self.device, self.rng.states[self.device.type])

    def __exit__(self, *exc):
        if self.active:
            self.rng.states[self.device.type] = _get_rng_state(self.device)
            _set_rng_state(self.device, self.saved)


class _RNGSnapshot:
    """Forward side of activation checkpointing: remember the TP stream as the forward saw it."""

    def __init__(self, rng: TPRandomState | None, holder: dict):
        self.rng, self.holder = rng, holder

    def __enter__(self):
        if self.rng is not None:
            self.holder["states"] = self.rng.get_states()

    def __exit__(self, *exc):
        return None


class _RNGReplay:
    """Recompute side: replay the remembered TP stream, then put the live stream back."""

    def __init__(self, rng: TPRandomState | None, holder: dict):
        self.rng, self.holder = rng, holder

    def __enter__(self):
        if self.rng is not None:
            self.live = self.rng.get_states()
            self.rng.set_states(self.holder["states"])

    def __exit__(self, *exc):
        if self.rng is not None:
            self.rng.set_states(self.live)


def checkpoint_rng_contexts(tp: TPContext):
    """`context_fn` for torch.utils.checkpoint (bind `tp` with functools.partial): recomputation draws
    the same split-region dropout masks as the forward did (torch itself replays only the default
    generator)."""
    holder: dict = {}
    return _RNGSnapshot(tp.rng, holder), _RNGReplay(tp.rng, holder)
