"""The flight recorder: every rank keeps a ring buffer of its last pipeline instructions and
collectives, to be dumped to OUT/debug/flight/rank_R.json when something stops (as torch's NCCL
flight recorder, but schedule-aware: an event names the instruction, micro-batch, chunk and peer).

An event is begun when a rank starts an instruction or a collective and ended when it returns (an
asynchronous one, e.g. NCCL's, when its work has completed: FLIGHT.end(works=...)), so a dump's open
events say exactly where each rank is stuck. `parallel/watch.py`'s `watched(group, op)`
records every collective; the pipeline executor records its computes, posts and waits. A watchdog
thread dumps the buffer when the rank has made no progress for `stall_s` seconds (a hung rank writes
its own dump while its peers time out) and on SIGUSR2 (read from a wakeup pipe, so even a rank blocked
inside a collective answers at once). `trident diagnose OUT` merges the dumps.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections import deque
from pathlib import Path

from trident.text.atomic import write_json_atomic
from trident.text.storage import location
from trident.text.store_errors import store_failure_or

DEFAULT_EVENTS = 2000
WATCHDOG_POLL_S = 0.5  # how often the watchdog looks for a stall
FIELDS = ("seq", "step", "op", "group", "peer", "microbatch", "chunk", "started", "ended", "failed")


class FlightRecorder:
    """One per process (FLIGHT). Recording costs a list append and two clock reads per event."""

    def __init__(self, size: int = DEFAULT_EVENTS):
        self.events: deque = deque(maxlen=size)
        self.seq, self.step, self.last_progress = 0, 0, time.time()
        self.folder: Path | None = None
        self.identity: dict = {}
        self.watchdog: _Watchdog | None = None
        self.lock = threading.Lock()  # the watchdog thread and the training thread may dump at once
        self.enabled = True
        self.unfinished: list = []  # (event, works) ended by their caller, their works still running
        self.unfinished_lock = threading.Lock()  # settled by the watchdog's dumps too

    def configure(self, folder: Path | str, rank: int, identity: dict, size: int = DEFAULT_EVENTS) -> None:
        """Dump into `folder` as rank_<rank>.json; `identity` (layout coordinates...) goes into every dump.
        size 0 turns recording off (begin/end do nothing; a dump holds no events)."""
        self.folder, self.enabled = location(folder), size > 0
        self.identity = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(), **identity}
        if size and size != self.events.maxlen:
            self.events = deque(self.events, maxlen=size)

    def begin(self, op: str, group: str = "", peer: int | None = None, microbatch: int | None = None,
              chunk: int | None = None) -> list:
        self.last_progress = now = time.time()
        if not self.enabled:
            return _OFF
        if self.unfinished:
            self.settle()
        self.seq += 1
        event = [self.seq, self.step, op, group, peer, microbatch, chunk, now, None, False]
        self.events.append(event)
        return event

    def end(self, event: list, failed: bool = False, works=()) -> None:
        """End `event` now, or, while any of `works` (torch.distributed.Work, or a CUDA event) still runs,
        when it has completed (settle)."""
        self.last_progress = time.time()
        if event is _OFF:
            return
        running = [work for work in works if not _completed(work)]
        if running and not failed:
            with self.unfinished_lock:
                self.unfinished.append((event, running))
            return
        event[8], event[9] = self.last_progress, failed

    def settle(self) -> None:
        """End the events whose works have completed since (seen now: the end time is when it was seen)."""
        with self.unfinished_lock:
            still = []
            for event, works in self.unfinished:
                if all(_completed(work) for work in works):
                    event[8] = time.time()
                else:
                    still.append((event, works))
            self.unfinished = still

    def snapshot(self) -> list[dict]:
        self.settle()
        return [dict(zip(FIELDS, event)) for event in list(self.events)]  # list(): atomic under the GIL

    def dump(self, reason: str) -> Path | None:
        """Write this rank's buffer (None when no folder was configured); never raises."""
        if self.folder is None:
            return None
        path = self.folder / f"rank_{self.identity.get('rank', 0)}.json"
        record = {**self.identity, "reason": reason, "time": time.time(), "step": self.step,
                  "last_progress": self.last_progress, "events": self.snapshot()}
        torch_trace = torch_flight_recorder()
        try:
            with self.lock:
                write_json_atomic(path, record, separators=(",", ":"))
                if torch_trace is not None:
                    write_json_atomic(self.folder / f"torch_rank_{self.identity.get('rank', 0)}.json", torch_trace,
                                      separators=(",", ":"))
        except Exception as error:  # diagnosis must never be what kills a run (a full disk, a store gone away)
            if not store_failure_or(error, OSError):
                raise
            return None
        return path

    def start_watchdog(self, stall_s: float) -> None:
        """Dump after `stall_s` seconds without progress (once per stall) and on every SIGUSR2."""
        if self.watchdog is None and threading.current_thread() is threading.main_thread():
            self.last_progress = time.time()
            self.watchdog = _Watchdog(self, stall_s)

    def stop_watchdog(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None


# torch's flight-recorder dump, by the name each torch gives it: _dump_fr_trace_json (2.6 on, NCCL and
# gloo), _dump_nccl_trace_json (2.3-2.5, NCCL only); its buffer is TORCH_FR_BUFFER_SIZE there and
# TORCH_NCCL_TRACE_BUFFER_SIZE before (train/launch.py's NCCL_ENV sets both)
TORCH_DUMPS = ("_dump_fr_trace_json", "_dump_nccl_trace_json")


def torch_flight_recorder() -> dict | None:
    """torch's own flight recorder (its collectives by process group, NCCL or gloo), as JSON, when it is
    on (TORCH_FR_BUFFER_SIZE > 0, which init_distributed sets) and this torch has it."""
    try:
        import torch._C._distributed_c10d as c10d
    except ImportError:  # a torch built without torch.distributed
        return None
    dump = next((getattr(c10d, name) for name in TORCH_DUMPS if hasattr(c10d, name)), None)
    if dump is None:
        return None
    try:
        trace = json.loads(dump(True, False))
    except (RuntimeError, ValueError):
        return None
    return trace if trace.get("entries") else None


def _completed(work) -> bool:
    """Whether a torch.distributed.Work (is_completed) or a CUDA event (query) has completed."""
    return work.is_completed() if hasattr(work, "is_completed") else work.query()


class _Watchdog:
    def __init__(self, recorder: FlightRecorder, stall_s: float):
        self.recorder, self.stall_s, self.stopping = recorder, stall_s, threading.Event()
        self.read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self.write_fd = write_fd
        # the C-level handler writes the signal number to the pipe even while the main thread is
        # blocked in a collective; the Python-level handler has nothing left to do
        self.previous_handler = signal.signal(signal.SIGUSR2, _dumped_by_watchdog)
        self.previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._run, name="flight-recorder", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import select

        dumped_stall = False
        while not self.stopping.is_set():
            ready, _, _ = select.select([self.read_fd], [], [], WATCHDOG_POLL_S)
            if ready:
                data = os.read(self.read_fd, 64)
                if signal.SIGUSR2 in data:
                    self.recorder.dump("SIGUSR2")
            stalled = time.time() - self.recorder.last_progress > self.stall_s
            if stalled and not dumped_stall:
                self.recorder.dump(f"no progress for {self.stall_s:.0f} s")
            dumped_stall = stalled

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes the select anyway
            os.write(self.write_fd, b"\0")  # wakes it now (0 is no signal): every train() ended up to a poll later
        self.thread.join(timeout=2)
        signal.set_wakeup_fd(self.previous_fd)
        signal.signal(signal.SIGUSR2, self.previous_handler)
        os.close(self.read_fd)
        os.close(self.write_fd)


def _dumped_by_watchdog(signum, frame) -> None:
    """SIGUSR2's Python handler: the watchdog thread writes the dump (see _Watchdog)."""
    return None


_OFF: list = [0, 0, "", "", None, None, None, 0.0, None, False]  # what begin returns while recording is off
FLIGHT = FlightRecorder()
