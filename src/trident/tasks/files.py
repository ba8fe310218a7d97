"""Readers for the benchmark files as published (JSONL, labels .lst, TSV, JSON per file).

Every failure raises TaskDataError naming the task, the file, the line and the format expected,
so a user holding the wrong download knows what to fetch instead.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterator

from trident.text.jsonl import UnreadableFile, iter_jsonl


class TaskDataError(ValueError):
    """A task's data file is missing or not in the published format."""


def require(path: Path, task: str, expected: str) -> Path:
    """Return path if it is a file, else raise naming the task, the path and the expected format."""
    if not path.is_file():
        raise TaskDataError(f"{task}: data file {path} not found; expected {expected}")
    return path


def _records(path: Path, task: str, expected: str) -> Iterator[tuple[str, Any]]:
    """(FILE:LINE, JSON value) of each non-blank line; any bad line raises TaskDataError naming it."""
    problems = {"malformed_json": "not valid JSON", "invalid_utf8": "not UTF-8"}
    try:
        for result in iter_jsonl(path, key=None):
            if result.reason == "blank":
                continue
            if result.reason is not None:
                raise TaskDataError(f"{task}: {result.where}: {problems.get(result.reason, result.reason)} "
                                    f"({result.detail}); expected {expected}")
            yield result.where, result.value
    except UnreadableFile as exc:
        raise TaskDataError(f"{task}: {exc}; expected {expected}") from exc


def read_jsonl(path: Path, task: str, expected: str, required: tuple[str, ...] = ()) -> list[dict]:
    """Objects of a JSON-lines file; each must be an object holding the `required` keys."""
    require(path, task, expected)
    records = []
    for where, record in _records(path, task, expected):
        if not isinstance(record, dict):
            raise TaskDataError(f"{task}: {where}: expected a JSON object; expected {expected}")
        missing = [key for key in required if key not in record]
        if missing:
            raise TaskDataError(f"{task}: {where}: missing key(s) {missing}; expected {expected}")
        records.append(record)
    if not records:
        raise TaskDataError(f"{task}: {path} holds no records; expected {expected}")
    return records


def read_labels(path: Path, task: str, expected: str, count: int) -> list[int]:
    """Integer labels, one a line (PIQA/WinoGrande *-labels.lst), exactly `count` of them."""
    require(path, task, expected)
    labels = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            labels.append(int(line.strip()))
        except ValueError as exc:
            raise TaskDataError(f"{task}: {path}:{line_no}: label {line.strip()!r} is not an integer; "
                                f"expected {expected}") from exc
    if len(labels) != count:
        raise TaskDataError(f"{task}: {path} has {len(labels)} labels for {count} examples; expected {expected}")
    return labels


def read_tsv(path: Path, task: str, expected: str, required: tuple[str, ...]) -> list[dict]:
    """Rows of a tab-separated file with a header line holding the `required` columns."""
    require(path, task, expected)
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TaskDataError(f"{task}: {path}: header lacks column(s) {missing}; expected {expected}")
        rows = []
        for line_no, row in enumerate(reader, 2):
            if any(row.get(c) is None for c in required):
                raise TaskDataError(f"{task}: {path}:{line_no}: too few columns; expected {expected}")
            rows.append(row)
    if not rows:
        raise TaskDataError(f"{task}: {path} holds no rows; expected {expected}")
    return rows


def read_json(path: Path, task: str, expected: str, required: tuple[str, ...]) -> dict:
    """One JSON object per file (RACE), holding the `required` keys."""
    require(path, task, expected)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TaskDataError(f"{task}: {path}: not valid JSON ({exc.msg}); expected {expected}") from exc
    missing = [key for key in required if not isinstance(record, dict) or key not in record]
    if missing:
        raise TaskDataError(f"{task}: {path}: missing key(s) {missing}; expected {expected}")
    return record


def field(record: dict, key: str, kind: type, task: str, where: str, expected: str):
    """record[key] checked to be of `kind`, else TaskDataError naming the place."""
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise TaskDataError(f"{task}: {where}: key {key!r} should be {kind.__name__}, got {value!r}; "
                            f"expected {expected}")
    return value
