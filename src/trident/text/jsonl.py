"""Reading JSONL text corpora (.jsonl, .jsonl.gz, .jsonl.zst) one line at a time, with every bad
line reported by file and line number instead of stopping the read.

A line is one of: a good record (its text field), or a problem with a reason:
  blank          the line holds only whitespace
  invalid_utf8   the bytes are not UTF-8
  malformed_json the line is not a JSON value
  missing_field  the value is not an object, lacks the key, or the key's value is not a string
"""
from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

REASONS = ("blank", "invalid_utf8", "malformed_json", "missing_field")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".json.zst")


@dataclass(frozen=True)
class LineResult:
    """The outcome of one line: `text` when good, else `reason` and a human `detail`."""

    path: str
    line: int  # 1-based
    text: str | None = None
    reason: str | None = None
    detail: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def describe(self) -> str:
        return f"{self.where}: {self.reason}: {self.detail}"


def is_jsonl(path) -> bool:
    return str(path).lower().endswith(JSONL_SUFFIXES)


def open_binary(path) -> io.BufferedIOBase:
    """A binary stream of the file's decompressed bytes (gzip and zstd by suffix)."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        import zstandard

        # read_across_frames: files written by concatenating zstd frames (common for shards)
        reader = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), read_across_frames=True,
                                                             closefd=True)
        return io.BufferedReader(reader)
    return open(path, "rb")


def iter_raw_lines(path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw bytes without the newline) for every line of the file."""
    with open_binary(path) as stream:
        for number, raw in enumerate(stream, start=1):
            yield number, raw.rstrip(b"\r\n")


def parse_line(path: str, line: int, raw: bytes, key: str = "text") -> LineResult:
    """Decode and parse one JSONL line, never raising: problems come back as a reason."""
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
    return LineResult(path, line, text=text)


def iter_jsonl(path, key: str = "text") -> Iterator[LineResult]:
    """Every line of a JSONL file as a LineResult, in file order."""
    name = str(path)
    for number, raw in iter_raw_lines(path):
        yield parse_line(name, number, raw, key)


def iter_texts(path, key: str = "text") -> Iterator[str]:
    """The texts of a .jsonl* file's good records, or a plain-text file in blocks of lines.

    Used where bad lines are simply skipped (tokenizer training); `trident tokenize` counts them.
    """
    if is_jsonl(path):
        for result in iter_jsonl(path, key):
            if result.text is not None:
                yield result.text
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
