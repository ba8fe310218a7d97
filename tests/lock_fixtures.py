"""The helpers the folder-lock tests share: a live run holding a folder (a real process), a trident command
in a real process whose lock beats fast and whose machine may be another container's, and a taker."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# a process that holds FOLDER's lock (LOCK_NAME) as run RUN_ID until its stdin closes; MACHINE '-' is this one,
# PID '-' its own (another: the pid it has in a container's own pid namespace)
HOLDER = """
import os, sys
from trident.data import output_lock, processes
folder, name, run_id, machine, pid = sys.argv[1:6]
output_lock.HEARTBEAT_S = 0.05
if machine != "-":
    processes.machine = lambda: machine
lock = output_lock.FolderLock(folder, run_id, name=name)
lock.record["pid"] = lock.record["pid"] if pid == "-" else int(pid)
lock.acquire()
print(os.getpid(), flush=True)
sys.stdin.read()
lock.release()
"""

# `trident ARGS...` in a process whose lock's heartbeat beats every 0.1 s, on another machine's identity
# (a container of this host that shares its hostname, not its pids): others judge it by its beat
COMMAND = """
import sys
from trident.data import output_lock, processes
output_lock.HEARTBEAT_S = 0.1
processes.machine = lambda: "another-container"
from trident.cli import main
sys.exit(main(sys.argv[1:]))
"""


class Holder:
    """A live run holding a folder's lock from its own process; `end()` lets it leave."""

    def __init__(self, folder: Path, name: str = ".trident-lock", run_id: str = "holder-run", machine: str = "-",
                 pid: str = "-"):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), name, run_id, machine, pid],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = int(self.proc.stdout.readline())  # printed once the lock is held

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


def start_command(args: list[str]) -> subprocess.Popen:
    """`trident ARGS` as COMMAND runs it (a session of its own, output captured)."""
    return subprocess.Popen([sys.executable, "-c", COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def wait_for(condition, timeout: float = 150, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended (exit {proc.returncode}) first:\n{proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)
