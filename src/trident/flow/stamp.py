"""Stage stamps: a stage whose settings, inputs and outputs are unchanged is skipped.

OUT/.flow/STAGE.json holds the stage's key (a hash of its settings, its input files' size and
mtime, and the keys of the stages it reads from), whether it finished, its wall-clock seconds, and the
digests (flow/digest.py: size and checksum per file) of the files it read and wrote. A stamp with the same
key that did not finish is a killed run: that stage resumes (train from its last checkpoint). A finished
stage whose files changed since (an output replaced by another command, an input an earlier stage wrote
again differently) runs again, and the log says which files changed."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Callable

from trident.flow.digest import differences, digest

StageFiles = Callable[[str], tuple[list[Path], list[Path]]]  # a stage's name -> (what it reads, what it writes)


def file_fingerprints(files) -> list[list]:
    """(path, size, mtime_ns) per file: enough to notice an edited or replaced input."""
    return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in map(Path, files)]


def stage_key(settings, files=(), upstream: list[str] = ()) -> str:
    """One hash of a stage's settings, its input files and the keys of the stages before it."""
    blob = json.dumps({"settings": settings, "files": file_fingerprints(files), "upstream": list(upstream)},
                      sort_keys=True, default=_plain)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _plain(value):
    """Config sections (dataclasses) as their keys and values; anything else as its text."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else str(value)


class Stages:
    """Runs the stages of one flow under OUT, printing each one's progress line and outcome; `files` names
    the files each stage reads and writes (their digests go in its stamp)."""

    def __init__(self, out: Path, total: int, files: StageFiles | None = None):
        self.dir = out / ".flow"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.total, self.count, self.ran, self.finished = total, 0, [], []
        self.files = files or (lambda name: ([], []))
        self.current: str | None = None  # the stage running now (the one that failed, after an error)

    def _read(self, name: str) -> dict:
        return read_stamp(self.dir.parent, name)

    def _write(self, name: str, key: str, done: bool, **fields) -> None:
        path = self.dir / f"{name}.json"
        stamp = {"key": key, "done": done, "time": time.time(), **fields}
        path.with_suffix(".tmp").write_text(json.dumps(stamp))
        path.with_suffix(".tmp").replace(path)

    def _changed(self, name: str, old: dict) -> str | None:
        """Why a finished stage with an unchanged key must run again: its files differ from its stamp's.
        A stamp from before files were recorded is trusted, and its files recorded now."""
        reads, writes = self.files(name)
        now = {"inputs": digest(reads, self.dir.parent, old.get("inputs")),
               "outputs": digest(writes, self.dir.parent, old.get("outputs"))}
        if "outputs" not in old:
            self._write(name, old["key"], True, seconds=old.get("seconds"), **now)
            return None
        for kind in ("outputs", "inputs"):
            change = differences(old.get(kind, {}), now[kind])
            if change:
                return f"its {kind} changed since it ran ({change})"
        if now != {k: old.get(k) for k in now}:  # only mtimes or inodes moved: keep the new marks
            self._write(name, old["key"], True, seconds=old.get("seconds"), **now)
        return None

    def run(self, name: str, key: str, complete: Callable[[], bool], work: Callable[[bool], object]) -> None:
        """Skip `name` when its stamp matches `key`, `complete()` and its files are those it read and
        wrote; else call work(resume), where resume says an earlier run with the same key was killed inside
        this stage."""
        self.count += 1
        old = self._read(name)
        title = f"[{self.count}/{self.total}] {name}"
        finished = old.get("key") == key and old.get("done") and complete()
        change = self._changed(name, old) if finished else None
        if finished and change is None:
            print(f"\n== {title}: unchanged, skipped ==", flush=True)
            self.finished.append(name)
            return
        reads = digest(self.files(name)[0], self.dir.parent, old.get("inputs"))  # what it reads, as it starts
        resume = old.get("key") == key and not old.get("done")
        moved = differences(old.get("inputs", reads), reads) if resume else None
        if moved:  # a killed stage whose inputs changed since: resuming would mix two inputs
            resume, change = False, f"its inputs changed since it was stopped ({moved})"
        print(f"\n== {title}{' (resuming)' if resume else ''}{f': {change}; running it again' if change else ''} ==",
              flush=True)
        self.current = name
        self._write(name, key, done=False, inputs=reads)
        start = time.perf_counter()
        work(resume)
        seconds = time.perf_counter() - start  # the one clock: this log line and the report's stage times
        self._write(name, key, done=True, seconds=round(seconds, 3), inputs=reads,
                    outputs=digest(self.files(name)[1], self.dir.parent))
        self.ran.append(name)
        self.finished.append(name)
        self.current = None
        print(f"{name}: done in {seconds:.1f} s (wall clock)", flush=True)

    def forget(self, name: str) -> None:
        """Drop `name`'s stamp: the stage runs on the next run whatever its key (its output was replaced)."""
        (self.dir / f"{name}.json").unlink(missing_ok=True)


def read_stamp(out: Path, name: str) -> dict:
    """OUT/.flow/NAME.json: the stage's key, whether it finished and, when it did, its wall-clock seconds."""
    path = out / ".flow" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}
