"""One run at a time in an output folder, however many nodes the run has.

The lock is a folder, OUT/.trident-lock/, holding
- `claim-<G>.json`: the run that holds OUT, generation G (the highest one present is the holder). It is
  created exclusively (written to a temporary file, then hard-linked: whole or absent, and of two
  creators of one generation exactly one succeeds), so taking over a dead run's lock (creating G+1) has
  one winner.
- `node-<host>-<pid>-<id>.json`: one record per process of the run that holds the lock (each node's launcher
  of a multi-node job, sharing the job's run id), rewritten by that process every HEARTBEAT_S with a
  growing `beat`. A process leaves by deleting its own record; the run holds OUT while any of its
  records is alive, so the node that ends first does not free the folder for another run.

A record is alive when its process runs: on this host, its pid exists (with the same start time); on
another host, its `beat` changes while this process watches it for STALE_AFTER_S on its own monotonic
clock (no two hosts' clocks are compared). A run with no live record is gone: its lock is taken over,
and the taker says so. A heartbeat that cannot be written, or a record another process removed, is
reported (an ERROR log line, the lock's `on_lost`, `check()` raising FolderLockLost).

An object store has no exclusive create: there a claim is written and read back, so two runs started
within the same second into one URL can both pass (documented in docs/bad-input.md).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from trident.data.output_folder import OWN_PREFIX, OutputFolderError
from trident.text.storage import is_remote, location
from trident.text.store_errors import store_failure_or

LOCK = f"{OWN_PREFIX}lock"  # the lock folder in OUT
HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0  # six unchanged heartbeats, watched on the observer's clock: the holder is gone
POLL_S = 0.5  # how often a watched record is read again
log = logging.getLogger(__name__)


class FolderBusy(OutputFolderError):
    """Another live run holds the output folder."""


class FolderLockLost(OutputFolderError):
    """This run's lock could not be kept (its heartbeat failed, or another process removed its record)."""


def process_start(pid: int) -> str | None:
    """The start time of process `pid` (Linux /proc, clock ticks since boot): a reused pid differs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _local_verdict(record: dict) -> bool | None:
    """Whether a record's process runs, judged by its pid on this host; None for another host's."""
    if record.get("host") != socket.gethostname():
        return None
    try:
        os.kill(int(record.get("pid", -1)), 0)
    except (ProcessLookupError, ValueError, OverflowError):
        return False
    except PermissionError:  # a process of another user: alive
        return True
    started = process_start(int(record["pid"]))
    return record.get("proc_start") in (None, started) or started is None


def _describe(held: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(held.get("started", 0))))
    return f"host {held.get('host')}, pid {held.get('pid')}, run {held.get('run_id')}, started {started}"


def _generation(name: str) -> int:
    return int(name[len("claim-"):-len(".json")])


class FolderLock:
    """`with FolderLock(out, run_id) as lock:` holds OUT's lock for the block (`lock.took_over` names the
    dead run whose lock was taken); raises FolderBusy when another live run holds it. `name` is the lock
    folder's name in OUT (a dataset prefix's own lock: `.trident-lock.PREFIX`)."""

    def __init__(self, folder: str | Path, run_id: str, name: str = LOCK,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self.folder = location(folder)
        self.dir = self.folder / name
        self.run_id, self.on_lost = run_id, on_lost
        host, pid = socket.gethostname(), os.getpid()
        self.record = {"host": host, "pid": pid, "run_id": run_id, "started": time.time(),
                       "proc_start": process_start(pid), "beat": 0, "gen": None}
        self.mine = self.dir / f"node-{host}-{pid}-{uuid.uuid4().hex[:8]}.json"  # two locks of one process apart
        self.took_over: dict | None = None
        self.lost: str | None = None
        self._dead: set[tuple[str, int]] = set()  # (record, beat) judged dead while acquiring
        self._made_folder = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- files --------------------------------------------------------------------------------------
    def _read(self, path: Path) -> dict | None:
        """A claim or record: None when absent, {} when unreadable (written whole, so never mid-write)."""
        try:
            held = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return held if isinstance(held, dict) else {}

    def _listing(self) -> tuple[dict[int, Path], dict[str, dict]]:
        """(claims by generation, live-or-dead node records by file name), this instant."""
        try:
            entries = list(self.dir.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return {}, {}
        claims = {_generation(p.name): p for p in entries if p.name.startswith("claim-") and p.name.endswith(".json")}
        nodes = {p.name: self._read(p) for p in entries if p.name.startswith("node-") and p.name.endswith(".json")}
        return claims, {name: record for name, record in nodes.items() if record is not None}

    def _write_record(self) -> None:
        text = json.dumps(self.record, sort_keys=True)
        if is_remote(self.dir):
            self.mine.write_text(text)
            return
        tmp = self.dir / f".{self.mine.name}.tmp"
        for attempt in range(3):
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                tmp.write_text(text)
                break
            except FileNotFoundError:  # the last holder removed the empty lock folder this instant
                if attempt == 2:
                    raise
        os.replace(tmp, self.mine)  # whole or absent: a reader never sees a half-written record

    def _create_claim(self, generation: int) -> bool:
        """Create claim-<generation> for this run; False when it exists (another process made it)."""
        path = self.dir / f"claim-{generation}.json"
        text = json.dumps({k: self.record[k] for k in ("host", "pid", "run_id", "started")}, sort_keys=True)
        if is_remote(self.dir):  # no exclusive create on a store: write, then read back
            if path.exists():
                return False
            path.write_text(text)
            return self._read(path) == json.loads(text)
        tmp = self.dir / f".claim.tmp-{self.record['pid']}"
        tmp.write_text(text)
        try:
            os.link(tmp, path)  # fails when it exists: one creator of each generation
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        return True

    def _delete(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            return  # removed by another process meanwhile

    # -- judging ------------------------------------------------------------------------------------
    def _live(self, records: dict[str, dict]) -> dict[str, dict]:
        """The records among `records` whose process runs: local pids at once, other hosts' by watching
        their beat for STALE_AFTER_S (stopping at the first that changes)."""
        live, watched = {}, {}
        for name, record in records.items():
            if (name, record.get("beat", -1)) in self._dead:
                continue
            verdict = _local_verdict(record)
            if verdict is None:
                watched[name] = record
            elif verdict:
                live[name] = record
            else:
                self._dead.add((name, record.get("beat", -1)))
        if live or not watched:
            return live
        until = time.monotonic() + STALE_AFTER_S
        while time.monotonic() < until:
            time.sleep(POLL_S)
            for name, record in watched.items():
                now = self._read(self.dir / name)
                if now is not None and now.get("beat") != record.get("beat"):
                    return {name: now}
        self._dead.update((name, record.get("beat", -1)) for name, record in watched.items())
        return {}

    def _busy(self, held: dict) -> FolderBusy:
        return FolderBusy(f"{self.folder}: another trident run is writing into this folder ({_describe(held)}); "
                          f"wait for it to end or stop it, or choose another --out")

    # -- acquiring ----------------------------------------------------------------------------------
    def acquire(self) -> "FolderLock":
        self._made_folder = not is_remote(self.folder) and not self.folder.exists()
        self._write_record()  # first: a claim whose run has no live record is a dead one
        try:
            for _ in range(10):  # a lost race (a claim created or released meanwhile): look again
                if self._try_claim():
                    break
            else:
                raise FolderBusy(f"{self.folder}: could not take the folder's lock {self.dir.name} "
                                 f"(another run keeps taking it)")
        except BaseException:
            self._delete(self.mine)
            raise
        self._beat = threading.Thread(target=self._heartbeat, name="trident-folder-lock", daemon=True)
        self._beat.start()
        return self

    def _try_claim(self) -> bool:
        claims, nodes = self._listing()
        top = max(claims, default=0)
        held = self._read(claims[top]) if top else None
        if top and held is None:
            return False  # released between the listing and the read
        if held and held.get("run_id") == self.run_id:
            return self._join(top)  # another node of this run, or a restart of it
        if top:
            ours = {n: r for n, r in nodes.items() if r.get("run_id") == held.get("run_id") and n != self.mine.name}
            live = self._live(ours)
            if live:
                raise self._busy(next(iter(live.values())))
        if not self._create_claim(top + 1):
            return False  # another process took it first: judge its claim next time round
        if held is not None:  # a run whose records are all dead (a claim with none left ended cleanly)
            dead = [r for r in nodes.values() if r.get("run_id") == held.get("run_id")]
            self.took_over = dead[0] if dead else (None if held else {})
        return self._confirm(top + 1)

    def _join(self, generation: int) -> bool:
        """Join the claim of this run: a record naming it, then the claim still on top."""
        self.record["gen"] = generation
        self._write_record()
        claims, _ = self._listing()
        if max(claims, default=0) == generation:
            return True
        self.record["gen"] = None
        self._write_record()
        return False

    def _confirm(self, generation: int) -> bool:
        """After creating claim `generation`: give it back when another claim rose above it or a live
        process of another run joined a claim (a node that joined while its run looked ended)."""
        claims, nodes = self._listing()
        mine = self.dir / f"claim-{generation}.json"
        if max(claims, default=0) != generation:
            self._delete(mine)
            self.took_over = None
            return False
        others = {n: r for n, r in nodes.items() if r.get("run_id") != self.run_id and r.get("gen") is not None}
        live = self._live(others)
        if live:
            self._delete(mine)
            self.took_over = None
            raise self._busy(next(iter(live.values())))
        self.record["gen"] = generation
        self._write_record()
        for older, path in claims.items():  # the dead runs' leftovers
            if older < generation:
                self._delete(path)
        for name in others:
            self._delete(self.dir / name)
        return True

    # -- holding ------------------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        failing_since = None
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if self._read(self.mine) is None:
                    return self._lose(f"{self.folder}: this run's lock record {self.mine.name} was removed by "
                                      f"another process (judged dead); another run may write into this folder")
                self.record["beat"] += 1
                self._write_record()
                failing_since = None
            except Exception as error:  # noqa: BLE001 -- any failure to write is reported, not fatal here
                failing_since = failing_since or time.monotonic()
                log.error("%s: the folder lock's heartbeat could not be written: %s", self.folder, error)
                if time.monotonic() - failing_since + HEARTBEAT_S >= STALE_AFTER_S:
                    return self._lose(f"{self.folder}: the folder lock's heartbeat failed for "
                                      f"{STALE_AFTER_S:.0f} s ({error}); another run may take this folder over")

    def _lose(self, message: str) -> None:
        self.lost = message
        log.error("%s", message)
        if self.on_lost is not None:
            self.on_lost(message)

    def check(self) -> None:
        """Raise FolderLockLost when the lock could not be kept."""
        if self.lost is not None:
            raise FolderLockLost(self.lost)

    def release(self) -> None:
        """Leave: delete this process's record. The run's claim goes with its last record."""
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join()
        try:
            if self._read(self.mine) is not None:
                self._delete(self.mine)
            claims, nodes = self._listing()
            top = max(claims, default=0)
            ours = any(record.get("run_id") == self.run_id for record in nodes.values())
            if top and not ours and (self._read(claims[top]) or {}).get("run_id") == self.run_id:
                self._delete(claims[top])  # the last to leave: a joiner after this sees no claim, and claims anew
                if not is_remote(self.dir) and not any(self.dir.iterdir()):
                    self.dir.rmdir()  # nothing left behind (a process arriving this instant recreates it)
                if self._made_folder and not any(self.folder.iterdir()):
                    self.folder.rmdir()  # a run that wrote nothing leaves no folder it made for its lock
        except Exception as error:  # a store that went away: the run's own error says so; the lock goes stale
            if not store_failure_or(error, OSError):
                raise

    def takeover_message(self) -> str | None:
        if self.took_over is None:
            return None
        gone = _describe(self.took_over) if self.took_over else "unreadable"
        return f"{self.folder}: took over the lock of a run that is no longer running ({gone})"

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
