"""The output folder of one run of a writing command, from the user's path or URL to its release.

Every command that writes (train, curate, run, demo, tokenize, eval --out, export-hf, data remove)
makes one RunFolder from the path it was given and hands it down: it resolves the path once
(`storage.location`), holds the folder's lock (data/output_lock.py: one run at a time, every node of
one job sharing it), and keeps the folder's marker and the rule of what this run may write into or
remove (data/output_folder.py). A dataset prefix (PREFIX.bin/.idx ...) is locked on its own, in its
folder: runs writing other prefixes there go on side by side.
"""
from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Callable

from trident.data.output_folder import (MARKER, OutputFolderError, claim_output_folder, read_marker, remove_own_outputs,
                                        write_marker)
from trident.data.output_lock import LOCK, FolderLock
from trident.data.processes import child_processes
from trident.text.storage import location

EXIT_LOCK_LOST = 2  # docs/bad-input.md: a lost lock ends the run at once, like a folder refused at start


def stop_at_once(command: str, message: str) -> None:
    """The lock is lost: end this process and its children now, so nothing more is written into a folder
    another run may hold (no checkpoint, no marker, no clean-up that writes there)."""
    print(f"trident {command}: error: {message}; stopped at once, writing nothing more there",
          file=sys.stderr, flush=True)
    for child in child_processes(os.getpid()):
        try:
            os.kill(child, signal.SIGKILL)  # torchrun's ranks die with it (PDEATHSIG), pool workers here
        except ProcessLookupError:
            continue
    os._exit(EXIT_LOCK_LOST)


class RunFolder:
    """`with RunFolder(out, "export-hf") as folder:` holds OUT's lock for the block (FolderBusy when
    another live run holds it or a folder around it). When the lock is lost meanwhile, `on_lost(message)`
    is called (default: stop_at_once)."""

    def __init__(self, given: str | Path, command: str, run_id: str | None = None, prefix: bool = False,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self.given, self.command = str(given), command
        self.path = location(given)  # the one place the user's path becomes a Path (or a UPath for a URL)
        self.folder = self.path.parent if prefix else self.path
        self.run_id = run_id or uuid.uuid4().hex
        stop = on_lost or (lambda message: stop_at_once(command, message))
        self.lock = FolderLock(self.folder, self.run_id, name=f"{LOCK}.{self.path.name}" if prefix else LOCK,
                               on_lost=stop)
        self._before: set[str] = set()

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return self.given

    # -- the lock -------------------------------------------------------------------------------------
    def hold(self) -> "RunFolder":
        """Take the folder's lock (FolderBusy when another live run holds it)."""
        self.lock.acquire()
        return self

    def takeover_message(self) -> str | None:
        return self.lock.takeover_message()

    def release(self) -> None:
        self.lock.release()

    def lost(self) -> str | None:
        """Why the lock could not be kept during the run (None: it was)."""
        return self.lock.lost

    def __enter__(self) -> "RunFolder":
        self.hold()
        if self.takeover_message():
            print(self.takeover_message(), file=sys.stderr)
        return self

    def __exit__(self, kind, error, trace) -> None:
        self.release()
        if kind is None:
            self.lock.check()  # a lock lost during the run: its outputs may be mixed with another run's

    # -- the marker and what this run may replace ------------------------------------------------------
    def marker(self) -> dict | None:
        return read_marker(self.path)

    def claim(self, overwrite: bool, same_run: Callable[[dict], bool] = lambda marker: False,
              resume_hint: str = "", prepared: tuple[str, ...] = ()) -> dict | None:
        """OutputFolderError unless this run may write here (see claim_output_folder); the earlier marker."""
        return claim_output_folder(self.path, self.command, overwrite, same_run, resume_hint, prepared)

    def remove_own(self, marker: dict | None, patterns: list[str]) -> list[Path]:
        """Delete the outputs an earlier run of this command recorded (only with its marker), naming them."""
        shown = _described(self.path, marker, self.command, patterns)
        removed = remove_own_outputs(self.path, marker, self.command, patterns)
        if removed:
            print(f"trident {self.command}: removed what its earlier run wrote in {self.given}: {shown}",
                  file=sys.stderr, flush=True)
        return removed

    def stamp(self, record: dict) -> None:
        write_marker(self.path, {"command": self.command, **record})

    def start_outputs(self, overwrite: bool) -> None:
        """For commands without a resume: claim, remove what this command's earlier run recorded (with
        overwrite), stamp; what is here now is not this run's (see record_outputs)."""
        marker = self.claim(overwrite)
        self.remove_own(marker, list((marker or {}).get("outputs", [])))
        self.stamp({"outputs": []})
        self._before = {p.name for p in self.path.iterdir()}

    def record_outputs(self) -> None:
        """Stamp the folder with what this run added to it (all that --overwrite may remove later)."""
        added = sorted(p.name for p in self.path.iterdir() if p.name not in self._before and p.name != MARKER
                       and not p.name.startswith(LOCK))
        self.stamp({"outputs": added})


def run_in_folder(given: str | Path, command: str, work: Callable[[RunFolder], int], prefix: bool = False) -> int:
    """`trident COMMAND`'s exit code: work(folder) holding RunFolder(given, command), or 2 printing the
    error when the folder is refused (another live run holds it, or it is not this command's to write)."""
    try:
        with RunFolder(given, command, prefix=prefix) as folder:
            return work(folder)
    except OutputFolderError as error:
        print(f"trident {command}: error: {error}", file=sys.stderr)
        return 2


def _described(folder: Path, marker: dict | None, command: str, patterns: list[str]) -> str:
    """What remove_own is about to delete, as one line: each entry, a folder with a few of its entries."""
    if marker is None or marker.get("command") != command:
        return ""
    names = []
    for path in (p for pattern in patterns for p in sorted(folder.glob(pattern))):
        inside = sorted(p.name for p in path.iterdir()) if path.is_dir() and not path.is_symlink() else None
        names.append(path.name if inside is None else
                     f"{path.name}/ ({', '.join(inside[:6])}{', ...' if len(inside) > 6 else ''})")
    return ", ".join(names)
