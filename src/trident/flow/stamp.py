"""Stage stamps: a stage whose settings, inputs and outputs are unchanged is skipped.

OUT/.flow/STAGE.json holds the stage's key (a hash of its settings, its input files' size and
mtime, and the keys of the stages it reads from) and whether it finished. A stamp with the same
key that did not finish is a killed run: that stage resumes (train from its last checkpoint)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Callable


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
    """Runs the stages of one flow under OUT, printing each one's progress line and outcome."""

    def __init__(self, out: Path, total: int):
        self.dir = out / ".flow"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.total, self.count, self.ran = total, 0, []

    def _read(self, name: str) -> dict:
        path = self.dir / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def _write(self, name: str, key: str, done: bool) -> None:
        path = self.dir / f"{name}.json"
        path.with_suffix(".tmp").write_text(json.dumps({"key": key, "done": done, "time": time.time()}))
        path.with_suffix(".tmp").replace(path)

    def run(self, name: str, key: str, complete: Callable[[], bool], work: Callable[[bool], object]) -> None:
        """Skip `name` when its stamp matches `key` and `complete()`; else call work(resume), where
        resume says an earlier run with the same key was killed inside this stage."""
        self.count += 1
        old = self._read(name)
        title = f"[{self.count}/{self.total}] {name}"
        if old.get("key") == key and old.get("done") and complete():
            print(f"\n== {title}: unchanged, skipped ==", flush=True)
            return
        resume = old.get("key") == key and not old.get("done")
        print(f"\n== {title}{' (resuming)' if resume else ''} ==", flush=True)
        self._write(name, key, done=False)
        start = time.perf_counter()
        work(resume)
        self._write(name, key, done=True)
        self.ran.append(name)
        print(f"{name}: done in {time.perf_counter() - start:.1f} s", flush=True)
