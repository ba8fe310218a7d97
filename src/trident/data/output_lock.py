"""One run at a time in an output folder.

The process that claims OUT (the launcher of `trident train`, or the only process; `trident curate`)
holds OUT/.trident-lock.json: host, pid, run id, start time and a heartbeat rewritten every
HEARTBEAT_S seconds while it runs. A second run into the same folder exits at once naming the holder;
the processes of the same run (torchrun's restarts, the other nodes of one job: same run id) share
the lock. A lock left behind by a process that is gone (its pid is dead on this host, or its heartbeat
stopped STALE_AFTER_S ago, on any host) is taken over, and the taker says so.

Locally the lock is created with O_EXCL (one of two simultaneous starts wins); an object store has no
exclusive create, so there the lock is written and read back: two runs started within the same
second into one URL can both pass (documented in docs/object-storage.md).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from trident.data.output_folder import OWN_PREFIX, OutputFolderError
from trident.text.storage import is_remote, location
from trident.text.store_errors import from_a_store

LOCK = f"{OWN_PREFIX}lock.json"
HEARTBEAT_S = 30.0
STALE_AFTER_S = 120.0  # four missed heartbeats: the holder is gone, whichever host it ran on


class FolderBusy(OutputFolderError):
    """Another live run holds the output folder."""


def _alive(held: dict) -> bool:
    """Whether the lock's holder still runs: its pid on this host, else its heartbeat's age."""
    if time.time() - float(held.get("heartbeat", 0)) > STALE_AFTER_S:
        return False
    if held.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(held.get("pid", -1)), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user: alive
        return True
    return True


def _describe(held: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(held.get("started", 0))))
    return f"host {held.get('host')}, pid {held.get('pid')}, run {held.get('run_id')}, started {started}"


class FolderLock:
    """`with FolderLock(out, run_id) as lock:` holds OUT's lock for the block (`lock.took_over` says
    whose stale lock was taken); raises FolderBusy when another live run holds it."""

    def __init__(self, folder: str | Path, run_id: str) -> None:
        self.folder, self.path = location(folder), location(folder) / LOCK
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": run_id, "started": time.time()}
        self.took_over: dict | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _read(self) -> dict | None:
        try:
            held = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            time.sleep(0.2)  # a lock being written by its holder this instant: read it once more
            try:
                held = json.loads(self.path.read_text())
            except (OSError, ValueError):
                return {}  # unreadable: a holder that died while writing it
        return held if isinstance(held, dict) else {}

    def _write(self, exclusive: bool) -> bool:
        """Write this process's record; with `exclusive`, only if no lock exists (False when one does)."""
        text = json.dumps(self.record | {"heartbeat": time.time()}, sort_keys=True)
        if is_remote(self.path):
            if exclusive and self.path.exists():
                return False
            self.path.write_text(text)
            return True
        self.folder.mkdir(parents=True, exist_ok=True)
        if exclusive:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            return True
        tmp = self.path.with_name(f".{LOCK}.tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, self.path)
        return True

    def _ours(self, held: dict | None) -> bool:
        return bool(held) and all(held.get(k) == self.record[k] for k in ("host", "pid", "run_id"))

    def acquire(self) -> "FolderLock":
        for _ in range(5):  # a lost race with another taker of a stale lock: look again
            if self._write(exclusive=True) and self._ours(self._read()):
                break
            held = self._read()
            if held is None:
                continue  # released between our attempt and the read
            if held and held.get("run_id") != self.record["run_id"] and _alive(held):
                raise FolderBusy(f"{self.folder}: another trident run is writing into this folder ({_describe(held)}); "
                                 f"wait for it to end or stop it, or choose another --out")
            if held.get("run_id") != self.record["run_id"]:
                self.took_over = held
            self._write(exclusive=False)  # ours: a stale lock taken over, or our own run's (a restart)
            if self._ours(self._read()):
                break
        else:
            raise FolderBusy(f"{self.folder}: could not take the folder's lock {LOCK} (another run keeps taking it)")
        self._beat = threading.Thread(target=self._heartbeat, name="trident-folder-lock", daemon=True)
        self._beat.start()
        return self

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if not self._ours(self._read()):
                return  # taken over (our heartbeat had stopped): never overwrite another run's lock
            self._write(exclusive=False)

    def release(self) -> None:
        self._stop.set()
        try:
            if self._ours(self._read()):
                self.path.unlink()
        except Exception as error:  # a store that went away: the run's own error says so; the lock goes stale
            if not from_a_store(error):
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
