"""One run at a time in an output folder and everything inside it, however many nodes the run has.

The lock is a folder, OUT/.trident-lock/, holding
- `claim-<G>.json`: the run that holds OUT, generation G (the highest one present is the holder). It is
  created exclusively (written to a temporary file named by host, pid and attempt, hard-linked, then
  read back: whole or absent, and of two creators of one generation exactly one succeeds), so taking
  over a dead run's lock (creating G+1) has one winner.
- `node-<host>-<pid>-<id>.json`: one record per process of the run that holds the lock (each node's launcher
  of a multi-node job, sharing the job's run id), rewritten by that process every HEARTBEAT_S with a
  growing `beat`. A process leaves by deleting its own record; the run holds OUT while any of its
  records is alive, so the node that ends first does not free the folder for another run.

Records are judged alive as data/lock_records.py says (by pid and start time on this machine: same boot
and pid namespace; by a changing beat elsewhere). A run with no live record is gone: its lock is taken
over, and the taker says so. A folder another live run holds covers every path inside it
(data/lock_scope.py): no lock is taken there. A heartbeat that cannot be written, or a takeover of
this run's lock (its record removed, or a newer claim than its own), is reported (an ERROR log line,
the lock's `on_lost`, `check()` raising FolderLockLost); a heartbeat never writes a record back
while another run's claim is the newest.

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

from trident.data import lock_records, processes
from trident.data.lock_records import LOCK, Judge, describe, listing, read_record
from trident.data.lock_scope import covered_message, covering_holder, mark_held, unmark_held
from trident.data.output_folder import OutputFolderError
from trident.text.storage import is_remote, location
from trident.text.store_errors import store_failure_or

HEARTBEAT_S = 10.0
log = logging.getLogger(__name__)


class FolderBusy(OutputFolderError):
    """Another live run holds the output folder (or a folder enclosing it)."""


class FolderLockLost(OutputFolderError):
    """This run's lock could not be kept (its heartbeat failed, or another run took the folder over)."""


class FolderLock:
    """`with FolderLock(out, run_id) as lock:` holds OUT's lock for the block (`lock.took_over` names the
    dead run whose lock was taken); raises FolderBusy when another live run holds it, or holds a folder
    enclosing it. `name` is the lock folder's name in OUT (a dataset prefix's own lock: `.trident-lock.PREFIX`)."""

    def __init__(self, folder: str | Path, run_id: str, name: str = LOCK,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self.folder = location(folder)
        self.dir, self.name = self.folder / name, name
        self.target = self.folder if name == LOCK else self.folder / name[len(LOCK) + 1:]  # what it guards
        self.run_id, self.on_lost = run_id, on_lost
        host, pid = socket.gethostname(), os.getpid()
        self.record = {"host": host, "machine": processes.machine(), "pid": pid, "run_id": run_id,
                       "started": time.time(), "proc_start": processes.process_start(pid), "beat": 0, "gen": None}
        self.mine = self.dir / f"node-{host}-{pid}-{uuid.uuid4().hex[:8]}.json"  # two locks of one process apart
        self.took_over: dict | None = None
        self.lost: str | None = None
        self.judge = Judge()  # remembers the records found dead while acquiring
        self._made_folder = self._marked = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- files --------------------------------------------------------------------------------------
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
        path, attempt = self.dir / f"claim-{generation}.json", uuid.uuid4().hex
        claim = {**{k: self.record[k] for k in ("host", "machine", "pid", "run_id", "started")}, "attempt": attempt}
        text = json.dumps(claim, sort_keys=True)
        if is_remote(self.dir):  # no exclusive create on a store: write, then read back
            if path.exists():
                return False
            path.write_text(text)
            return read_record(path) == claim
        # one temporary file per host, process and attempt: containers share pids, a process retries
        tmp = self.dir / f".claim-{generation}.tmp-{self.record['host']}-{self.record['pid']}-{attempt}"
        tmp.write_text(text)
        try:
            os.link(tmp, path)  # fails when it exists: one creator of each generation
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return (read_record(path) or {}).get("attempt") == attempt  # read back: the claim is this attempt's

    def _delete(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            return  # removed by another process meanwhile

    def _busy(self, held: dict) -> FolderBusy:
        return FolderBusy(f"{self.folder}: another trident run is writing into this folder ({describe(held)}); "
                          f"wait for it to end or stop it, or choose another --out")

    # -- acquiring ----------------------------------------------------------------------------------
    def acquire(self) -> "FolderLock":
        covered = covering_holder(self.folder, self.name, self.judge)
        if covered is not None:  # a folder around this one (or a prefix inside it) is another live run's
            raise FolderBusy(covered_message(self.target, *covered))
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
        mark_held(self.run_id)  # this process's steps (and children) may write inside the folder
        self._marked = True
        self._beat = threading.Thread(target=self._heartbeat, name="trident-folder-lock", daemon=True)
        self._beat.start()
        return self

    def _try_claim(self) -> bool:
        claims, nodes = listing(self.dir)
        top = max(claims, default=0)
        held = read_record(claims[top]) if top else None
        if top and held is None:
            return False  # released between the listing and the read
        if held and held.get("run_id") == self.run_id:
            return self._join(top)  # another node of this run, or a restart of it
        if top:
            ours = {n: r for n, r in nodes.items() if r.get("run_id") == held.get("run_id") and n != self.mine.name}
            live = self.judge.live(self.dir, ours)
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
        claims, _ = listing(self.dir)
        if max(claims, default=0) == generation:
            return True
        self.record["gen"] = None
        self._write_record()
        return False

    def _confirm(self, generation: int) -> bool:
        """After creating claim `generation`: give it back when another claim rose above it or a live
        process of another run joined a claim (a node that joined while its run looked ended)."""
        claims, nodes = listing(self.dir)
        mine = self.dir / f"claim-{generation}.json"
        if max(claims, default=0) != generation:
            self._delete(mine)
            self.took_over = None
            return False
        others = {n: r for n, r in nodes.items() if r.get("run_id") != self.run_id and r.get("gen") is not None}
        live = self.judge.live(self.dir, others)
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
                if read_record(self.mine) is None:
                    return self._lose(f"{self.folder}: this run's lock record {self.mine.name} was removed by "
                                      f"another process (judged dead): another run took this folder over")
                self.record["beat"] += 1
                self._write_record()
                newest = max(listing(self.dir)[0], default=0)
                if newest != self.record["gen"]:  # taken over (or removed) meanwhile: the record just written goes
                    self._delete(self.mine)
                    return self._lose(f"{self.folder}: this run's lock (claim {self.record['gen']}) is no longer "
                                      f"the newest ({f'claim {newest}' if newest else 'no claim'}): another run "
                                      f"took this folder over")
                failing_since = None
            except Exception as error:  # noqa: BLE001 -- any failure to write is reported, not fatal here
                failing_since = failing_since or time.monotonic()
                log.error("%s: the folder lock's heartbeat could not be written: %s", self.folder, error)
                if time.monotonic() - failing_since + HEARTBEAT_S >= lock_records.STALE_AFTER_S:
                    return self._lose(f"{self.folder}: the folder lock's heartbeat failed for "
                                      f"{lock_records.STALE_AFTER_S:.0f} s ({error}); another run may take this "
                                      f"folder over")

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
        if self._marked:
            self._marked = False
            unmark_held(self.run_id)
        try:
            if read_record(self.mine) is not None:
                self._delete(self.mine)
            claims, nodes = listing(self.dir)
            top = max(claims, default=0)
            ours = any(record.get("run_id") == self.run_id for record in nodes.values())
            if top and not ours and (read_record(claims[top]) or {}).get("run_id") == self.run_id:
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
        gone = describe(self.took_over) if self.took_over else "unreadable"
        return f"{self.folder}: took over the lock of a run that is no longer running ({gone})"

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
