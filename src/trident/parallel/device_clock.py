"""One clock for timing work on a device: the host's perf_counter on CPU, CUDA event pairs on CUDA.

On CUDA the host returns from a kernel launch long before the kernel ends, so perf_counter around
an instruction measures when it was queued. A CudaClock records an event on the current stream
instead, and reads the times only when the step is over (`settle`: one synchronize for the whole
step, not one per mark). A mark is what `mark()` returns (a float on the host clock, an event on
CUDA); `seconds(mark)` is its time since `start()`, valid after `settle()`.
"""
from __future__ import annotations

import time
from typing import Callable


class HostClock:
    """perf_counter (or any `read` function): a mark already is seconds since start()."""

    def __init__(self, read: Callable[[], float] = time.perf_counter):
        self.read, self.origin = read, 0.0

    def start(self) -> None:
        self.origin = self.read()

    def mark(self) -> float:
        return self.read() - self.origin

    def settle(self) -> None:
        """Nothing is in flight: host marks are final when taken."""

    def seconds(self, mark: float) -> float:
        return mark


class CudaClock:
    """Timing events recorded on the device's current stream; their times read after one synchronize."""

    def __init__(self, device, event_type=None, synchronize=None):
        import torch

        self.device = device
        self.event_type = event_type or torch.cuda.Event
        self.synchronize = synchronize or torch.cuda.synchronize
        self.origin = None

    def _record(self):
        event = self.event_type(enable_timing=True)
        event.record()  # on the current stream: after every kernel queued so far
        return event

    def start(self) -> None:
        self.origin = self._record()

    def mark(self):
        if self.origin is None:
            raise RuntimeError("CudaClock.mark() before start(): no origin event")
        return self._record()

    def settle(self) -> None:
        """Wait once for every recorded event (the end of the step), so their times can be read."""
        self.synchronize(self.device)

    def seconds(self, mark) -> float:
        return self.origin.elapsed_time(mark) / 1000.0  # elapsed_time is in milliseconds


def clock_for(device) -> HostClock | CudaClock:
    """The clock that times work on `device` (a torch.device or its name): CUDA events on CUDA, the
    host clock elsewhere (a CPU's work is done when the call returns)."""
    import torch

    return CudaClock(torch.device(device)) if torch.device(device).type == "cuda" else HostClock()
