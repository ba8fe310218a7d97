"""A shard's documents as raw lines: read without decoding them (so they can be copied without
re-encoding), each decoded on demand with the id ``read_shard`` gives it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from trident.curate.document import CurateError, Document
from trident.text.jsonl import UnreadableFile, iter_raw_lines
from trident.text.storage import location


def shard_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-blank line of a shard: row i is ``read_shard``'s i-th document."""
    try:
        for number, data, _ in iter_raw_lines(path):
            # A record starts with "{"; anything else is blank exactly when read_shard skips it.
            if data[:1] == b"{" or data.decode("utf-8", errors="replace").strip():
                yield number, data
    except UnreadableFile as err:
        raise CurateError(f"{path}: {err.detail} (from line {err.line} on)") from err


def parse_document(path: Path, number: int, data: bytes) -> Document:
    """The Document of one line from ``shard_lines`` (the id ``read_shard`` gives it); CurateError
    naming the file and line for a record read_shard would refuse."""
    try:
        doc = Document.from_json(json.loads(data.decode("utf-8")), default_id=f"{path.name}:{number}")
        doc.text.encode("utf-8")  # a lone surrogate could not be written back out
    except ValueError as err:  # JSON, UTF-8 and UnicodeEncodeError errors are ValueErrors
        raise CurateError(f"{path}: line {number}: {err}") from err
    return doc


def shard_documents(path: Path) -> Iterator[Document]:
    """``read_shard(path)``'s documents, read with less overhead per line."""
    path = location(path)
    for number, data in shard_lines(path):
        yield parse_document(path, number, data)
