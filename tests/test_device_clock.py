"""Timing on the device's clock: the host clock on CPU, CUDA events on CUDA (read once a step), for
the pipeline timeline, the bubble and straggler sections."""
import itertools

import pytest
import torch

from trident.parallel.device_clock import CudaClock, HostClock, clock_for
from trident.parallel.pipeline.timeline import Box, TimelineRecorder
from trident.train.diagnostics import PhaseClock


@pytest.mark.parametrize("device, kind", [("cpu", HostClock), (torch.device("cpu"), HostClock),
                                          ("cuda", CudaClock), ("cuda:1", CudaClock),
                                          (torch.device("cuda", 0), CudaClock), ("meta", HostClock)])
def test_the_clock_is_chosen_by_the_device(device, kind):
    clock = clock_for(device)
    assert type(clock) is kind
    if kind is CudaClock:
        assert clock.device == torch.device(device) and clock.event_type is torch.cuda.Event


class DeviceWork:
    """A stand-in for a CUDA stream, for CPU tests: events complete when the device reaches them, and
    reading a time before the device got there fails, as torch.cuda.Event.elapsed_time does."""

    def __init__(self):
        self.queued, self.done, self.synchronized = 0.0, 0.0, 0

    def run(self, seconds: float) -> None:  # queue `seconds` of work: the host returns at once
        self.queued += seconds

    def synchronize(self, device) -> None:
        self.done, self.synchronized = self.queued, self.synchronized + 1

    def event_type(self, enable_timing: bool):
        work = self

        class Event:
            def record(self):
                self.at = work.queued

            def elapsed_time(self, end) -> float:
                if max(self.at, end.at) > work.done:
                    raise RuntimeError("event not yet completed")
                return (end.at - self.at) * 1000.0

        assert enable_timing
        return Event()


def test_a_recorder_on_device_events_reads_device_times_with_one_synchronize_a_step():
    work = DeviceWork()
    recorder = TimelineRecorder(1, CudaClock("cuda", work.event_type, work.synchronize))
    for step in range(2):
        recorder.start()
        work.run(0.25)
        with recorder.record("forward", 0, 0):
            work.run(1.0)  # the host is back at once: only the events know the kernel took 1 s
        posted = recorder.now()
        work.run(0.5)
        recorder.add("recv", 1, 0, posted, recorder.now())
        assert recorder.stop() == [Box(1, "forward", 0, 0, 0.25, 1.25), Box(1, "recv", 1, 0, 1.25, 1.75)]
        assert work.synchronized == step + 1
    assert not recorder.recording


def test_phases_on_the_host_clock_and_on_device_events():
    ticks = itertools.count(start=10.0, step=0.5)
    host = PhaseClock(HostClock(lambda: next(ticks)))
    host.start()
    host.mark("forward_backward")
    host.mark("finalize")
    assert host.times == {"forward_backward": 0.5, "finalize": 0.5}
    work = DeviceWork()
    device = PhaseClock(CudaClock("cuda", work.event_type, work.synchronize))
    device.start()
    for phase, seconds in (("forward_backward", 2.0), ("finalize", 0.25), ("step", 0.5)):
        work.run(seconds)
        device.mark(phase)
    assert device.times == {"forward_backward": 2.0, "finalize": 0.25, "step": 0.5}
    assert work.synchronized == 1
