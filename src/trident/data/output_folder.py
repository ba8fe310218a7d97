"""Output folders that never lose earlier results: a command writes into an empty folder, into its
own earlier run's folder when that run is being resumed, or into any folder with `--overwrite`.
Every folder trident writes carries a marker (OUT/.trident-run.json) naming the command and run, and
trident only ever deletes what a marker says trident wrote."""
from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Callable

from trident.text.atomic import write_json_atomic
from trident.text.storage import location, remove_tree

MARKER = ".trident-run.json"
OWN_PREFIX = ".trident-"  # trident's bookkeeping in a folder: the marker, the lock (data/output_lock.py)


def is_own_bookkeeping(name: str) -> bool:
    """The marker, the lock, or one of their half-written temporaries (`..trident-run.json.tmpPID`:
    another node of the same job may be writing the marker while this one looks)."""
    return name.startswith(OWN_PREFIX) or name.startswith("." + OWN_PREFIX)


class OutputFolderError(ValueError):
    """The output folder holds results this run must not replace."""


def read_marker(folder: str | Path) -> dict | None:
    """The folder's marker, or None when trident left none (or it is unreadable)."""
    try:
        marker = json.loads((location(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def write_marker(folder: str | Path, record: dict) -> None:
    write_json_atomic(location(folder) / MARKER, record)


def claim_output_folder(folder: str | Path, command: str, overwrite: bool,
                        same_run: Callable[[dict], bool] = lambda marker: False, resume_hint: str = "",
                        prepared: tuple[str, ...] = ()) -> dict | None:
    """Check that `command` may write into `folder`; returns the folder's earlier marker (or None).

    Allowed: a missing or empty folder; a folder whose marker was written by `command` and that
    `same_run(marker)` accepts (a resume, a restart); anything with overwrite. Otherwise raises
    OutputFolderError naming the folder and a few of its entries. Entries matching `prepared` (glob
    patterns: what was put there for the run before it started, e.g. its launch script) count as empty."""
    folder = location(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputFolderError(f"{folder}: exists and is not a folder")
    # a folder holding nothing but a marker (a run that stopped before writing) or a lock counts as empty
    entries = sorted(p.name for p in folder.iterdir() if not is_own_bookkeeping(p.name) and not any(
        fnmatch.fnmatch(p.name, pattern) for pattern in prepared)) if folder.is_dir() else []
    marker = read_marker(folder)
    if not entries or overwrite:
        return marker
    if marker is not None and marker.get("command") == command and same_run(marker):
        return marker
    shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
    owner = f"a trident {marker.get('command')} run" if marker else "files trident did not write"
    raise OutputFolderError(f"{folder}: output folder is not empty (it holds {owner}: {shown}){resume_hint}; "
                            f"choose another --out, or pass --overwrite to write into it anyway")


def remove_own_outputs(folder: str | Path, marker: dict | None, command: str, patterns: list[str]) -> list[Path]:
    """With the folder's earlier marker from `command`: delete its entries matching `patterns`
    (what that command writes). Without such a marker nothing is deleted. Returns what was removed."""
    if marker is None or marker.get("command") != command:
        return []
    removed = []
    for pattern in patterns:
        for path in sorted(location(folder).glob(pattern)):
            remove_tree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            removed.append(path)
    return removed
