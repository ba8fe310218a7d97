"""Which process is which, and whether it still runs: what a folder lock judges its holders by.

A process is named by its pid, its start time (a reused pid starts later) and its machine: the
kernel's boot id with the pid namespace's inode, so two containers that share a hostname but not a
pid namespace are two machines (their pids cannot be compared), and two processes of one container
or one host are one.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path


def process_start(pid: int) -> str | None:
    """The start time of process `pid` (Linux /proc, clock ticks since boot): a reused pid differs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def machine() -> str:
    """This process's machine as pids see it: boot id and pid namespace (the hostname where /proc is not)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:pidns-{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return f"host:{socket.gethostname()}"


def runs(pid: int, started: str | None) -> bool:
    """Whether process `pid` of this machine runs and is the one that started at `started` (None: not
    recorded). A process of another user (no permission to signal it) is judged by its start time too."""
    if pid <= 0:
        return False  # not a process (kill(0) and kill(-1) would signal groups)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, OverflowError):
        return False
    except PermissionError:
        pass  # it exists; whether it is the recorded one, its start time says
    now = process_start(pid)
    return started is None or now is None or now == started


def child_processes(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc; [] elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
