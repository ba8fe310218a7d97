"""Where every dropped document went: one compressed log per shard and stage step.

A drop log is SHARD.drops.jsonl.zst beside the shard a task writes; one JSON line per document
dropped there: {"id", "url", "stage", "reason"} plus "score" for score-based filters (the quality
classifier) and "position" for input records that could not be read (file and byte or line).
Logs are written by default (they cost one line per dropped document, compressed), gathered into
OUT/drops/ when the run is published, and read back by `trident curate why OUT URL|ID`.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Iterator

import zstandard

from trident.text.storage import copy_file, location, open_read, open_write, replace

SUFFIX = ".drops.jsonl.zst"


def log_path(shard: Path | str) -> Path:
    """The drop log that goes with the shard file `shard` (…/shard-00003.jsonl.zst, or .jsonl)."""
    shard = location(shard)
    return shard.with_name(shard.name.removesuffix(".zst").removesuffix(".jsonl") + SUFFIX)


class DropLog:
    """Appends drop records to a shard's log; the file is created at the first record (a shard
    that dropped nothing has no log) and complete once `close()` returns."""

    def __init__(self, path: Path | str) -> None:
        self.path, self.count = location(path), 0
        self._file = self._zst = None

    def add(self, doc_id: str, url: str, stage: str, reason: str, **extra) -> None:
        """One dropped document: its id and URL ("" when it has none), the stage and reason, and
        whatever else explains it (score=..., position=...)."""
        if self._zst is None:
            self._file = open_write(self.path)
            self._zst = zstandard.ZstdCompressor(level=3).stream_writer(self._file, closefd=False)
        record = {"id": doc_id, "url": url, "stage": stage, "reason": reason, **extra}
        self._zst.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        self.count += 1

    def close(self) -> None:
        if self._zst is not None:
            self._zst.close()
            self._file.close()
            self._zst = self._file = None

    def __enter__(self) -> "DropLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_log(path: Path | str) -> Iterator[dict]:
    """The records of one drop log, in order."""
    with open_read(path) as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
        for line in io.TextIOWrapper(stream, encoding="utf-8"):
            if line.strip():
                yield json.loads(line)


def count_records(path: Path | str) -> int:
    """The number of records in one drop log: its non-empty lines, counted without decoding them
    (a serial step at a run's end, where parsing every record took ~0.1 s per 10,000 drops)."""
    with open_read(path) as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
        return sum(1 for line in io.BufferedReader(stream, 1 << 20) if line.strip())


def publish_logs(work: Path, folder: Path, keep_work: bool) -> dict:
    """Move (copy, with keep_work) every drop log under WORK/phase-*/ to FOLDER/phase-NN/; returns
    {"folder", "files", "records"} (records counted as they are published)."""
    work, folder = location(work), location(folder)
    files = records = 0
    for log in sorted(work.glob(f"phase-*/*{SUFFIX}"), key=str):
        target = folder / log.parent.name / log.name
        (copy_file if keep_work else replace)(log, target)
        files += 1
        records += count_records(target)
    return {"folder": folder.name, "files": files, "records": records}


def check_logged(stages: list[dict], logged: int) -> list[str]:
    """A problem when the drop logs hold a different number of records than the stages dropped."""
    dropped = sum(v for entry in stages for k, v in entry["counters"].items() if k.startswith("dropped:"))
    if dropped == logged:
        return []
    return [f"drop logs hold {logged} records but the stages dropped {dropped} documents"]
