"""Reading JSONL text corpora (.jsonl, .jsonl.gz, .jsonl.zst) one line at a time, with every bad
line reported by file and line number instead of stopping the read.

A line is one of: a good record (its parsed value, and its text field when a key is asked for),
or a problem with a reason:
  blank          the line holds only whitespace
  too_large      the line is longer than the reader's `max_line_bytes` (only when one is given);
                 its bytes are counted as they stream past, never held in memory
  invalid_utf8   the bytes are not UTF-8
  malformed_json the line is not a JSON value
  missing_field  (with a key) the value is not an object, lacks the key, or the key's value is not a string
  invalid_unicode (with a key) the text holds a lone surrogate (JSON "\\ud800"), which no encoder accepts
A compressed file that is cut off or corrupt (including a zstd stream that ends inside its last
frame, and a gzip member or zstd frame that fails its checksum) raises UnreadableFile naming the
first line that could not be read; every line before it has been delivered, and no line of the
damaged member/frame is (see trident.text.compressed). Line numbers are 1-based; a line's bytes exclude its ending ("\\n", "\\r\\n").
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

from trident.text.compressed import DamagedData, open_binary
from trident.text.damage import BROKEN_OFF, is_damage

REASONS = ("blank", "invalid_utf8", "malformed_json", "missing_field", "invalid_unicode")  # parse_line's
DEFAULT_MAX_DOC_BYTES = 5_000_000  # one document's (line's) size limit, the same in every reader
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".json.zst")
_CHUNK = 1 << 20


class UnreadableFile(OSError):
    """The rest of a file cannot be read (truncated or corrupt compressed data) from `line` on."""

    def __init__(self, path, line: int, detail: str) -> None:
        super().__init__(f"{path}:{line}: unreadable from this line on: {detail}")
        self.path, self.line, self.detail = str(path), line, detail

    def __reduce__(self):
        # rebuilt from its own fields when it crosses a process boundary
        return type(self), (self.path, self.line, self.detail)


@dataclass(frozen=True)
class LineResult:
    """The outcome of one line: `value` (and `text` when parsed with a key) when good, else `reason`
    and a human `detail`."""

    path: str
    line: int  # 1-based
    text: str | None = None
    reason: str | None = None
    detail: str = ""
    value: Any = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def describe(self) -> str:
        return f"{self.where}: {self.reason}: {self.detail}"


class RawLine(NamedTuple):
    """One line's bytes without its line ending; `data` is None for a line over the size limit."""

    number: int
    data: bytes | None
    size: int


def is_jsonl(path) -> bool:
    return str(path).lower().endswith(JSONL_SUFFIXES)


def _content_size(line: bytes, rest: int, tail: bytes) -> int:
    """Bytes of a line without its "\\n" / "\\r\\n"; `tail` holds the last bytes read of it."""
    size = len(line) + rest
    if tail.endswith(b"\n"):
        size -= 2 if tail.endswith(b"\r\n") else 1
    return size


def _skip_rest(stream, line: bytes) -> int:
    """Read past the rest of an over-long line; its size without the line ending."""
    rest, tail = 0, line[-2:]
    while not tail.endswith(b"\n"):
        piece = stream.readline(_CHUNK)
        if not piece:
            break
        rest += len(piece)
        tail = (tail + piece)[-2:]
    return _content_size(line, rest, tail)


def iter_raw_lines(path, max_line_bytes: int | None = None) -> Iterator[RawLine]:
    """Every line of the file in order; one longer than `max_line_bytes` comes with data None.

    UnreadableFile when the (compressed) data breaks off; the lines before it are all delivered.
    """
    # room for the "\r\n" after a line of exactly max_line_bytes
    cap = -1 if max_line_bytes is None else max_line_bytes + 2
    number = 0
    with open_binary(path) as stream:
        try:
            while line := stream.readline(cap):
                number += 1
                if len(line) == cap and not line.endswith(b"\n"):
                    yield RawLine(number, None, _skip_rest(stream, line))
                    continue
                data = line.rstrip(b"\r\n")
                if max_line_bytes is not None and len(data) > max_line_bytes:
                    yield RawLine(number, None, len(data))
                else:
                    yield RawLine(number, data, len(data))
        except (DamagedData, OSError) as err:
            raise UnreadableFile(path, number + 1, f"{type(err).__name__}: {err}") from err


def parse_line(path: str, line: int, raw: bytes, key: str | None = "text") -> LineResult:
    """Decode and parse one JSONL line, never raising: problems come back as a reason.

    With `key` the value must be an object holding a string there (`text`); key=None takes any JSON value.
    """
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return LineResult(path, line, reason="invalid_utf8",
                          detail=f"byte {err.start}: {raw[err.start:err.start + 4]!r} is not UTF-8")
    if not decoded.strip():
        return LineResult(path, line, reason="blank", detail="empty line")
    try:
        value = json.loads(decoded)
    except json.JSONDecodeError as err:
        return LineResult(path, line, reason="malformed_json", detail=f"{err.msg} at column {err.colno}")
    if key is None:
        return LineResult(path, line, value=value)
    if not isinstance(value, dict):
        return LineResult(path, line, reason="missing_field",
                          detail=f"expected a JSON object with key {key!r}, got {type(value).__name__}")
    if key not in value:
        keys = ", ".join(sorted(value)[:8]) or "none"
        return LineResult(path, line, reason="missing_field", detail=f"no key {key!r} (keys: {keys})")
    text = value[key]
    if not isinstance(text, str):
        return LineResult(path, line, reason="missing_field",
                          detail=f"key {key!r} holds {type(text).__name__}, not a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return LineResult(path, line, reason="invalid_unicode", detail=f"character {err.start}: {err.reason}")
    return LineResult(path, line, text=text, value=value)


def iter_jsonl(path, key: str | None = "text", max_line_bytes: int | None = None) -> Iterator[LineResult]:
    """Every line of a JSONL file as a LineResult, in file order (UnreadableFile as iter_raw_lines)."""
    name = str(path)
    for number, raw, size in iter_raw_lines(path, max_line_bytes):
        yield line_result(name, number, raw, size, key, max_line_bytes)


def line_result(name: str, number: int, raw: bytes | None, size: int, key: str | None,
                max_line_bytes: int | None) -> LineResult:
    """The LineResult of one of iter_raw_lines' lines (``raw`` None: over ``max_line_bytes``)."""
    if raw is None:
        return LineResult(name, number, reason="too_large", detail=f"{size} bytes, over the limit of {max_line_bytes}")
    return parse_line(name, number, raw, key)


def iter_texts(path, key: str = "text", counters: Counter | None = None,
               max_line_bytes: int | None = None, damaged: dict | None = None) -> Iterator[str]:
    """The texts of a .jsonl* file's good records, or a plain-text file in blocks of lines.

    Used where bad lines are skipped (tokenizer training, contamination checks): with `counters`
    each one is counted as `skipped_lines:<reason>`; a file that breaks off ends its texts there
    and counts `skipped_lines:unreadable_file` (never raises UnreadableFile). With `damaged`, a file
    with damaged lines gets an entry {reason: lines, "lines_before": N (where it broke off)}
    under its name (see trident.text.damage).
    """
    counters = Counter() if counters is None else counters
    if is_jsonl(path):
        lost: dict = {}
        try:
            for result in iter_jsonl(path, key, max_line_bytes):
                if result.text is not None:
                    yield result.text
                    continue
                counters[f"skipped_lines:{result.reason}"] += 1
                if is_damage(result.reason):
                    lost[result.reason] = lost.get(result.reason, 0) + 1
        except UnreadableFile as err:
            counters["skipped_lines:unreadable_file"] += 1
            lost.update({"unreadable_file": 1, BROKEN_OFF: err.line - 1})
        if damaged is not None and lost:
            damaged[str(path)] = lost
        return
    block: list[str] = []
    with open_binary(path) as stream:
        for raw in stream:
            block.append(raw.decode("utf-8", errors="replace"))
            # BPE pre-tokenization never crosses a newline, so line blocks lose nothing
            if len(block) == 1000:
                yield "".join(block)
                block = []
    if block:
        yield "".join(block)
