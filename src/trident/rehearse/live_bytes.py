"""Live tensor bytes, counted by storage, for real or fake tensors.

torch's MemTracker refuses a module that runs more than once per tracked step (gradient
accumulation runs every layer once per micro-batch), and cannot see gradients kept outside `.grad`
(trident's flat fp32 buffers), so rehearsal counts for itself: a dispatch mode that sees every
tensor an operator returns, counts each storage the first time it appears, and subtracts it when
the storage is freed (a weak reference's callback). Works under FakeTensorMode, where storages have
sizes but no memory, which is how a 530B rank's memory is measured on one CPU.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as live:` ... `live.now`, `live.peak` (highest since the last reset_peak),
    `live.highest` (highest ever)."""

    def __init__(self):
        super().__init__()
        self.now = 0
        self.peak = 0
        self.highest = 0
        self._refs: dict[int, weakref.ref] = {}  # storage cdata -> weak reference (keeps the callback alive)

    def reset_peak(self) -> None:
        self.peak = self.now

    def track(self, tensor: torch.Tensor) -> None:
        """Count `tensor`'s storage (once), e.g. for tensors made before the mode was entered."""
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._refs:
            return
        size = storage.nbytes()
        self._refs[key] = weakref.ref(storage, lambda _, key=key, size=size: self._free(key, size))
        self.now += size
        self.peak = max(self.peak, self.now)
        self.highest = max(self.highest, self.now)

    def _free(self, key: int, size: int) -> None:
        if self._refs.pop(key, None) is not None:
            self.now -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor) and not _is_view_of_input(value, args):
                self.track(value)
        return out


def _is_view_of_input(value: torch.Tensor, args) -> bool:
    """In-place ops and views return storages that already exist (counted where they were made)."""
    return value._is_view() or any(value is a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor))
