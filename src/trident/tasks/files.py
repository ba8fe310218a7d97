"""Readers for the benchmark files as published (JSONL, labels .lst, TSV, JSON per file).

Every failure raises TaskDataError naming the task, the file, the line and the format expected,
so a user holding the wrong download knows what to fetch instead.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Callable, Iterator

from trident.text.jsonl import DEFAULT_MAX_DOC_BYTES, UnreadableFile, iter_jsonl


class TaskDataError(ValueError):
    """A task's data file is missing or not in the published format."""


# A field's type: (accepts the value, what it must be). Readers declare one per field they use.
Kind = tuple[Callable[[Any], bool], str]
TEXT: Kind = (lambda v: isinstance(v, str), "a string")
INT: Kind = (lambda v: type(v) is int, "an integer")
LABEL: Kind = (lambda v: isinstance(v, (str, int)), "a string, integer or boolean label")


def strings(count: int | None = None) -> Kind:
    """A list of strings, of exactly `count` items when given."""
    return (lambda v: isinstance(v, list) and (count is None or len(v) == count) and all(isinstance(x, str) for x in v),
            f"a list of {count} strings" if count else "a list of strings")


def check_fields(record: dict, fields: dict[str, Kind], task: str, where: str, expected: str) -> dict:
    """record, once every key of `fields` is present with a value of its kind; else TaskDataError naming it."""
    missing = [key for key in fields if key not in record]
    if missing:
        raise TaskDataError(f"{task}: {where}: missing key(s) {missing}; expected {expected}")
    for key, (accepts, what) in fields.items():
        if not accepts(record[key]):
            shown = repr(record[key])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise TaskDataError(f"{task}: {where}: field '{key}' must be {what}, got {shown}; expected {expected}")
    return record


def read_text(path: Path, task: str, expected: str) -> str:
    """The file decoded as UTF-8; undecodable bytes raise TaskDataError naming FILE:LINE."""
    data = require(path, task, expected).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise TaskDataError(f"{task}: {path}:{line}: not UTF-8 ({exc.reason} at byte {exc.start}); "
                            f"expected {expected}") from None


def require(path: Path, task: str, expected: str) -> Path:
    """Return path if it is a file, else raise naming the task, the path and the expected format."""
    if not path.is_file():
        raise TaskDataError(f"{task}: data file {path} not found; expected {expected}")
    return path


def _records(path: Path, task: str, expected: str) -> Iterator[tuple[str, Any]]:
    """(FILE:LINE, JSON value) of each non-blank line; any bad line raises TaskDataError naming it."""
    problems = {"malformed_json": "not valid JSON", "invalid_utf8": "not UTF-8", "too_large": "record too large"}
    try:  # the same per-line limit as curation and tokenize: a bomb is refused, not expanded
        for result in iter_jsonl(path, key=None, max_line_bytes=DEFAULT_MAX_DOC_BYTES):
            if result.reason == "blank":
                continue
            if result.reason is not None:
                raise TaskDataError(f"{task}: {result.where}: {problems.get(result.reason, result.reason)} "
                                    f"({result.detail}); expected {expected}")
            yield result.where, result.value
    except UnreadableFile as exc:
        raise TaskDataError(f"{task}: {exc}; expected {expected}") from exc


def read_jsonl(path: Path, task: str, expected: str, fields: dict[str, Kind]) -> list[tuple[str, dict]]:
    """(FILE:LINE, object) of each record of a JSON-lines file; each must be an object holding every
    key of `fields` with a value of its kind, else TaskDataError naming FILE:LINE and the field."""
    require(path, task, expected)
    records = []
    for where, record in _records(path, task, expected):
        if not isinstance(record, dict):
            raise TaskDataError(f"{task}: {where}: expected a JSON object; expected {expected}")
        records.append((where, check_fields(record, fields, task, where, expected)))
    if not records:
        raise TaskDataError(f"{task}: {path} holds no records; expected {expected}")
    return records


def read_labels(path: Path, task: str, expected: str, count: int) -> list[int]:
    """Integer labels, one a line (PIQA/WinoGrande *-labels.lst), exactly `count` of them."""
    labels = []
    for line_no, line in enumerate(read_text(path, task, expected).splitlines(), 1):
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
    handle = io.StringIO(read_text(path, task, expected), newline="")
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


def read_json(path: Path, task: str, expected: str, fields: dict[str, Kind]) -> dict:
    """One JSON object per file (RACE), holding every key of `fields` with a value of its kind."""
    try:
        record = json.loads(read_text(path, task, expected))
    except json.JSONDecodeError as exc:
        raise TaskDataError(f"{task}: {path}:{exc.lineno}: not valid JSON ({exc.msg}); expected {expected}") from exc
    if not isinstance(record, dict):
        raise TaskDataError(f"{task}: {path}: expected a JSON object; expected {expected}")
    return check_fields(record, fields, task, str(path), expected)
