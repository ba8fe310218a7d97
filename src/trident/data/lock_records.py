"""The files in a folder's lock (OUT/.trident-lock/, data/output_lock.py) and how its records are judged.

A record is alive when its process runs: on this machine (data/processes.py: the same boot and pid
namespace), its pid exists with the same start time, whoever owns it; on another machine, its `beat`
changes while this process watches it for STALE_AFTER_S on its own monotonic clock (no two machines'
clocks are compared).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from trident.data import processes
from trident.data.output_folder import OWN_PREFIX

LOCK = f"{OWN_PREFIX}lock"  # the lock folder in OUT
STALE_AFTER_S = 60.0  # six unchanged heartbeats, watched on the observer's clock: the holder is gone
POLL_S = 0.5  # how often a watched record is read again


def read_record(path: Path) -> dict | None:
    """A claim or record: None when absent, {} when unreadable (written whole, so never mid-write)."""
    try:
        held = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) else {}


def generation(name: str) -> int:
    return int(name[len("claim-"):-len(".json")])


def listing(directory: Path) -> tuple[dict[int, Path], dict[str, dict]]:
    """(claims by generation, live-or-dead node records by file name) of one lock folder, this instant."""
    try:
        entries = list(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return {}, {}
    claims = {generation(p.name): p for p in entries if p.name.startswith("claim-") and p.name.endswith(".json")}
    nodes = {p.name: read_record(p) for p in entries if p.name.startswith("node-") and p.name.endswith(".json")}
    return claims, {name: record for name, record in nodes.items() if record is not None}


def describe(held: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(held.get("started", 0))))
    return f"host {held.get('host')}, pid {held.get('pid')}, run {held.get('run_id')}, started {started}"


def local_verdict(record: dict) -> bool | None:
    """Whether a record's process runs, judged by its pid on this machine; None for another machine's
    (a record without a machine, from an older trident, is watched as another machine's)."""
    if record.get("machine") != processes.machine():
        return None
    try:
        pid = int(record.get("pid", -1))
    except (TypeError, ValueError):
        return False
    return processes.runs(pid, record.get("proc_start"))


class Judge:
    """Judges lock records alive or dead, remembering the dead ones (by name and beat) so that a second
    look does not watch them again."""

    def __init__(self) -> None:
        self.dead: set[tuple[str, int]] = set()

    def live(self, directory: Path, records: dict[str, dict]) -> dict[str, dict]:
        """The records among `records` (of lock folder `directory`) whose process runs: this machine's at
        once, other machines' by watching their beat for STALE_AFTER_S (stopping at the first that changes)."""
        live, watched = {}, {}
        for name, record in records.items():
            if (name, record.get("beat", -1)) in self.dead:
                continue
            verdict = local_verdict(record)
            if verdict is None:
                watched[name] = record
            elif verdict:
                live[name] = record
            else:
                self.dead.add((name, record.get("beat", -1)))
        if live or not watched:
            return live
        until = time.monotonic() + STALE_AFTER_S
        while time.monotonic() < until:
            time.sleep(POLL_S)
            for name, record in watched.items():
                now = read_record(directory / name)
                if now is not None and now.get("beat") != record.get("beat"):
                    return {name: now}
        self.dead.update((name, record.get("beat", -1)) for name, record in watched.items())
        return {}

    def holder(self, directory: Path) -> dict | None:
        """A live record of the run holding lock folder `directory` (its newest claim's), or None."""
        claims, nodes = listing(directory)
        if not claims:
            return None
        held = read_record(claims[max(claims)]) or {}
        live = self.live(directory, {n: r for n, r in nodes.items() if r.get("run_id") == held.get("run_id")})
        return next(iter(live.values()), None)
