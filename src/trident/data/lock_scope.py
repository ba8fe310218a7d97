"""A folder's lock covers everything inside it: a run may not write at or under a folder another live
run holds, whatever lock of its own it takes there (a subfolder's, or a dataset prefix's).

The steps of one run write inside its folder on its behalf (`trident run` curates into OUT/curated/NAME
and starts `trident train --out OUT/train`): the runs a process and its parents hold are listed in
HELD_ENV, which child processes inherit, and a folder held by one of them is not another run's.
"""
from __future__ import annotations

import os
from pathlib import Path

from trident.data.lock_records import LOCK, Judge, describe
from trident.text.storage import is_remote

HELD_ENV = "TRIDENT_HELD_RUNS"  # the run ids this process and its parents hold folder locks for


def held_runs() -> list[str]:
    return [run for run in os.environ.get(HELD_ENV, "").split(",") if run]


def mark_held(run_id: str) -> None:
    os.environ[HELD_ENV] = ",".join([*held_runs(), run_id])


def unmark_held(run_id: str) -> None:
    runs = held_runs()
    if run_id in runs:
        runs.remove(run_id)
    if runs:
        os.environ[HELD_ENV] = ",".join(runs)
    else:
        os.environ.pop(HELD_ENV, None)


def _lock_folders(folder: Path, name: str) -> list[Path]:
    """The lock folders that cover a lock named `name` in `folder`: every enclosing folder's lock (and the
    folder's own, for a prefix's lock), and, for a folder's lock, the prefix locks inside it."""
    enclosing = [folder, *folder.parents] if name != LOCK else list(folder.parents)
    found = [parent / LOCK for parent in enclosing if (parent / LOCK).is_dir()]
    if name == LOCK and not is_remote(folder) and folder.is_dir():
        found += sorted(p for p in folder.iterdir() if p.name.startswith(f"{LOCK}.") and p.is_dir())
    return found


def covering_holder(folder: Path, name: str, judge: Judge) -> tuple[Path, dict] | None:
    """(the folder held, a live record of its holder) when another live run holds a folder enclosing
    `folder` (or a prefix inside it, for a folder's lock); None when no other run does."""
    ours = held_runs()
    for lock in _lock_folders(folder, name):
        holder = judge.holder(lock)
        if holder is not None and holder.get("run_id") not in ours:
            held = lock.parent if lock.name == LOCK else lock.parent / lock.name[len(LOCK) + 1:]
            return held, holder
    return None


def covered_message(target: Path, held: Path, holder: dict) -> str:
    """FolderBusy's message for a path inside (or holding) a folder another live run writes into."""
    where = "which holds it" if held in target.parents or held == target else "inside it"
    return (f"{target}: another trident run is writing into {held}, {where} ({describe(holder)}); wait for "
            f"that run to end or stop it, or write somewhere else")
