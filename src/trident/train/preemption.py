"""Stopping cleanly: a scheduler's SIGTERM or SIGUSR1 (Slurm's warning ahead of the time limit), or
Ctrl-C's SIGINT, reaching any one rank stops every rank at the same step boundary with a checkpoint.

A signal only sets a flag. After every step the ranks all-reduce (MAX) two small integers, the flag and
"a time-based save is due", so they agree on what to do without any rank acting on a signal alone.
The stop itself (wait for a background save, save synchronously, write OUT/preempted.json) is the
trainer's; this module only decides when. A lost folder lock is no stop: another run may hold OUT, so
the run ends at once without saving or writing a marker there (data/run_folder.stop_at_once, exit 2).
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from trident.text.atomic import write_json_atomic
from trident.text.storage import location
from trident.text.store_errors import store_failure_or

EXIT_PREEMPTED = 75  # sysexits' EX_TEMPFAIL: stopped on request after saving; run again to resume
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
MARKER = "preempted.json"
EXIT_MARKER = "exit.json"  # a rank's error exit code, for the launcher (torchrun's own code is 1 for any failure)


class Preempted(Exception):
    """Every rank stopped on a signal after writing a checkpoint; the message is the one line to print."""


class StopRequests:
    """Catches the stop signals while installed (from process start: a signal during start-up is kept
    for the first step boundary); `agree()` is the per-step collective decision."""

    def __init__(self, save_interval_minutes: float = 0.0, log=print):
        self.interval_s, self.log = save_interval_minutes * 60.0, log
        self.signal_name, self.announced, self.last_save = None, False, time.monotonic()
        self.previous: dict = {}

    def install(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():  # Python delivers signals there only
            for sig in STOP_SIGNALS:
                self.previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def uninstall(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def _on_signal(self, signum, frame) -> None:
        """Only a flag (printing here could re-enter a print the signal interrupted)."""
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
        elif signum == signal.SIGINT:  # a second Ctrl-C: the user wants out now
            raise KeyboardInterrupt

    def saved(self) -> None:
        self.last_save = time.monotonic()

    def agree(self, device=None) -> tuple[str | None, bool]:
        """Collective over the world: (the signal that stops every rank, or None; whether a time-based
        save is due)."""
        if self.signal_name is not None and not self.announced:
            self.announced = True
            self.log(f"{self.signal_name}: every rank stops after this step and saves a checkpoint"
                     + (" (Ctrl-C again to stop without saving)" if self.signal_name == "SIGINT" else ""))
        code = 0 if self.signal_name is None else 1 + [s.name for s in STOP_SIGNALS].index(self.signal_name)
        due = int(self.interval_s > 0 and time.monotonic() - self.last_save >= self.interval_s)
        import torch  # here: the launcher reads this module's markers without loading torch
        import torch.distributed as dist

        from trident.parallel.watch import watched

        if dist.is_initialized() and dist.get_world_size() > 1:
            flags = torch.tensor([code, due], dtype=torch.int32, device=device or torch.device("cpu"))
            with watched(None, "all_reduce stop flags"):
                dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            code, due = (int(v) for v in flags.tolist())
        return (STOP_SIGNALS[code - 1].name if code else None), bool(due)


def resume_command(argv: list[str] | None = None) -> str:
    """The command that resumes this run: the one that started it, with checkpoint.load=auto."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("checkpoint.load=")]
    return "trident " + " ".join(shlex.quote(a) for a in args + ["checkpoint.load=auto"])


def stop_message(signal_name: str, step: int, checkpoint: Path) -> str:
    return (f"stopped by {signal_name} after step {step}: checkpoint {checkpoint}; "
            f"resume with: {resume_command()}")


def write_marker(out: Path, record: dict, name: str = MARKER) -> None:
    """OUT/preempted.json (a stop: the launcher exits EXIT_PREEMPTED) or OUT/exit.json (an error's code)."""
    write_json_atomic(location(out) / name, record | {"written_at": time.time(), "pid": os.getpid()})


def read_marker(out: Path, since: float, name: str = MARKER) -> dict | None:
    """The record a run in `out` wrote after `since` (a launcher's start time), if any."""
    try:
        record = json.loads((location(out) / name).read_text())
    except Exception as error:  # none, unreadable, or on a store that went away (the run said so in its line)
        if not store_failure_or(error, OSError, ValueError):
            raise
        return None
    return record if record.get("written_at", 0) >= since else None
