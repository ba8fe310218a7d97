"""The output folder of one run of a writing command, from the user's path or URL to its release.

Every command that writes (train, curate, run, demo, tokenize, eval --out, export-hf, data remove)
makes one RunFolder from the path it was given and hands it down: it resolves the path once
(`storage.location`), holds the folder's lock (data/output_lock.py: one run at a time, every node of
one job sharing it), and keeps the folder's marker and the rule of what this run may write into or
remove (data/output_folder.py). A dataset prefix (PREFIX.bin/.idx ...) is locked on its own, in its
folder: runs writing other prefixes there go on side by side.
"""
from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Callable

from trident.data.output_folder import (MARKER, OutputFolderError, claim_output_folder, read_marker, remove_own_outputs,
                                        write_marker)
from trident.data.output_lock import LOCK, FolderLock
from trident.text.storage import location


class RunFolder:
    """`with RunFolder(out, "export-hf") as folder:` holds OUT's lock for the block (FolderBusy when
    another live run holds it; FolderLockLost at the end when the lock could not be kept)."""

    def __init__(self, given: str | Path, command: str, run_id: str | None = None, prefix: bool = False,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self.given, self.command = str(given), command
        self.path = location(given)  # the one place the user's path becomes a Path (or a UPath for a URL)
        self.folder = self.path.parent if prefix else self.path
        self.run_id = run_id or uuid.uuid4().hex
        self.lock = FolderLock(self.folder, self.run_id, name=f"{LOCK}.{self.path.name}" if prefix else LOCK,
                               on_lost=on_lost)
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
        """Delete the outputs an earlier run of this command recorded (only with its marker)."""
        return remove_own_outputs(self.path, marker, self.command, patterns)

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
