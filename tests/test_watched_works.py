"""Waiting for asynchronous exchanges as NCCL needs it (issue 59 items 3, 4): parallel/watch.py's
watched(...).wait(work) bounds the host's wait on the CPU only (NCCL's wait with a timeout busy-waits the
host; the group's timeout bounds the op), and its flight-recorder event stays open until the work has
completed, not until NCCL has queued it, so a hang's dump names the op in flight; torch's own flight
recorder is read under the name each torch version gives it. A synchronous collective's event ends
when a CUDA event recorded after it has completed."""
from __future__ import annotations

import json
from datetime import timedelta

import torch

from trident.parallel import flight
from trident.parallel.flight import FLIGHT
from trident.parallel.watch import watched

TIMEOUT = timedelta(seconds=5)


class FakeWork:
    """A torch.distributed.Work that has been queued (wait returns) but completes only when told."""

    def __init__(self):
        self.done, self.waits = False, []

    def wait(self, *timeout):
        self.waits.append(timeout)

    def is_completed(self) -> bool:
        return self.done


def _event(op: str) -> dict:
    return next(event for event in reversed(FLIGHT.snapshot()) if event["op"] == op)


def test_a_gpu_wait_has_no_host_timeout_and_its_event_ends_when_the_work_completes():
    work = FakeWork()
    with watched(None, "wait gradient bucket 7") as watch:
        watch.wait(work, TIMEOUT, on_gpu=True)
    assert work.waits == [()]  # NCCL: no busy-waiting host timeout
    assert _event("wait gradient bucket 7")["ended"] is None  # queued, still running: a dump shows it open
    work.done = True
    FLIGHT.begin("the next op")  # any later event settles the finished ones
    assert _event("wait gradient bucket 7")["ended"] is not None


def test_a_cpu_wait_keeps_its_host_bound_and_a_completed_work_ends_its_event_at_once():
    work = FakeWork()
    work.done = True  # gloo: wait returns when the op has completed
    with watched(None, "wait parameter all_gather") as watch:
        watch.wait(work, TIMEOUT)
    assert work.waits == [(TIMEOUT,)] and _event("wait parameter all_gather")["ended"] is not None


def test_a_failed_wait_ends_its_event_failed():
    work = FakeWork()
    try:
        with watched(None, "wait that fails") as watch:
            watch.wait(work, TIMEOUT, on_gpu=True)
            raise RuntimeError("NCCL communicator was aborted")
    except RuntimeError:
        pass
    event = _event("wait that fails")
    assert event["ended"] is not None and event["failed"]


def test_a_synchronous_collective_on_a_gpu_ends_when_the_stream_gets_past_it(monkeypatch):
    class FakeEvent:  # torch.cuda.Event: recorded after the op was queued, query() once the GPU ran it
        reached = False

        def record(self):
            pass

        def query(self) -> bool:
            return FakeEvent.reached

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    with watched(None, "all_reduce grad norm"):
        pass  # dist.all_reduce on NCCL returns once queued
    assert _event("all_reduce grad norm")["ended"] is None
    FakeEvent.reached = True
    assert _event("all_reduce grad norm")["ended"] is not None  # a dump (snapshot) settles it too


def test_torch_flight_recorder_is_read_under_either_name(monkeypatch):
    import torch._C._distributed_c10d as c10d

    trace = {"entries": [{"profiling_name": "nccl:all_reduce"}]}
    monkeypatch.delattr(c10d, "_dump_fr_trace_json", raising=False)  # torch 2.3-2.5: NCCL's name only
    monkeypatch.setattr(c10d, "_dump_nccl_trace_json", lambda collectives, only_active: json.dumps(trace),
                        raising=False)
    assert flight.torch_flight_recorder() == trace
    monkeypatch.delattr(c10d, "_dump_nccl_trace_json")
    assert flight.torch_flight_recorder() is None  # neither: no torch trace, no error
