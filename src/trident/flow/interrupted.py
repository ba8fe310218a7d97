"""A flow stopped on request (Ctrl-C, a scheduler's SIGTERM) rather than by a failure: which stage was
running, the step its training saved, and the `trident run` command that goes on from there."""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from trident.flow.spec import FlowError
from trident.train.launch import child_processes
from trident.train.preemption import EXIT_PREEMPTED, read_marker

EXIT_INTERRUPTED = 130  # 128 + SIGINT: stopped before anything was saved to resume from
FORWARDED = (signal.SIGTERM, signal.SIGUSR1)  # sent to the flow alone, they are passed to its stage's process


class FlowInterrupted(FlowError):
    """A stage stopped on a signal; `code` is train's: 75 when training saved a checkpoint, else 130."""

    def __init__(self, stage: str, resume: str, signal_name: str, step: int | None = None, checkpoint: str = ""):
        self.stage, self.resume, self.signal_name, self.step = stage, resume, signal_name, step
        self.code = EXIT_PREEMPTED if step is not None else EXIT_INTERRUPTED
        where = (f"at step {step} of its `{stage}` stage ({signal_name}; checkpoint {checkpoint})"
                 if step is not None else f"during its `{stage}` stage ({signal_name})")
        super().__init__(f"interrupted {where}; resume with: {resume}")

    def headline(self) -> str:
        """The report's first line: where the flow stopped (without the resume command, given apart)."""
        return str(self).split("; resume with:")[0]


def resume_command(flow_file: str | Path, out: str | Path) -> str:
    """The `trident run` command that goes on: finished stages are skipped, a stopped train resumes."""
    return "trident run " + shlex.join([str(flow_file), "--out", str(out)])


@contextlib.contextmanager
def signals_for_the_child(caught: list[str]):
    """While a stage's child process (train, eval) runs. Ctrl-C reaches the whole foreground process
    group, so the child has it too and stops at its next step boundary after saving: this process notes
    it and waits (subprocess.run, on a KeyboardInterrupt, would kill the child 0.25 s into its save). A
    SIGTERM or SIGUSR1 sent to this process alone is passed on to its children. A second Ctrl-C is the
    child's too (train then stops without saving)."""
    if threading.current_thread() is not threading.main_thread():  # Python sets handlers there only
        yield
        return

    def note(signum, frame) -> None:
        caught.append(signal.Signals(signum).name)
        if signum in FORWARDED:
            for pid in child_processes(os.getpid()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, *FORWARDED)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def child_stage(stage: str, run_folder: Path | None, resume: str, work: Callable[[], object]) -> None:
    """Run a stage whose work is a child `trident` process; its stop on a signal raises FlowInterrupted:
    with the step and checkpoint when it is training (`run_folder`'s preempted.json, written after
    `started`), else with the signal this process caught."""
    caught: list[str] = []
    started = time.time()
    try:
        with signals_for_the_child(caught):
            work()
    except FlowError as failed:
        stopped = read_marker(run_folder, since=started) if run_folder is not None else None
        if stopped is not None:
            raise FlowInterrupted(stage, resume, stopped["signal"], stopped["step"], stopped["checkpoint"]) from None
        if caught:
            raise FlowInterrupted(stage, resume, caught[0]) from failed
        raise
