"""Reading input shards (WARC, HTML files, JSONL[.gz|.zst]) as Documents, and writing JSONL.zst.

Readers never raise on a bad record: they report it to a `RecordLog` (file, position, reason),
which counts it and, in strict mode, raises CurateError instead. Positions are 1-based line
numbers for JSONL, byte offsets of the record (of its gzip member in a .warc.gz) for WARC, where a
damaged record costs only itself (trident.curate.read.warc).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np
import zstandard

from trident.curate.document import CurateError, Document
from trident.curate.read.doc_ids import DocumentIds, Naming
from trident.curate.read.record_log import RecordLog
from trident.text.jsonl import (DEFAULT_MAX_DOC_BYTES, LineResult, UnreadableFile, iter_jsonl, iter_raw_lines,
                                line_result)
from trident.text.storage import is_remote, location, make_folder, open_write

SHARD_SUFFIX = ".jsonl.zst"
WARC_SUFFIXES = (".warc", ".warc.gz")
HTML_SUFFIXES = (".html", ".htm")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst")
MIN_GROUPS, MIN_GROUP_BYTES = 32, 1 << 20  # input files are split into this many groups, unless smaller than that
FRAME_BYTES = 1 << 20  # uncompressed bytes per zstd frame of a written shard (well under HOLD_LIMIT)
_BLOCK = 1 << 16  # line bytes handed to the compressor at once
LEVEL, WORK_LEVEL = 3, 1  # zstd levels: published shards; shards only a later phase reads (2x faster to write)


def output_level(work: bool) -> int:
    """The zstd level of a phase's outputs: WORK_LEVEL where only a later phase reads them."""
    return WORK_LEVEL if work else LEVEL
PLAIN_SUFFIX = ".jsonl"  # a work shard written without compression (ShardWriter level None)
_json_line = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(x, ensure_ascii=False), one encoder for all
# The quick record path's JSON, in C and made once: json.loads wraps the scanner in whitespace checks
# (done here as it does them), and JSONEncoder.encode builds a new C encoder for every line. That
# encoder skips the circular-reference check: a record just parsed from JSON cannot hold a cycle.
_scan = json.JSONDecoder().scan_once
_JSON_SPACE = " \t\n\r"  # json's whitespace around a document (str.strip's is wider)
_c_encoder = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, json.JSONEncoder(ensure_ascii=False).default, json.encoder.encode_basestring, None, ": ", ", ",
    False, False, True)


# Control characters json escapes as \u00XX (or \b, \f): a text holding one takes the encoder.
_RARE_CONTROL = bytes(set(range(32)) - set(b"\t\n\r"))
_TEXT_SLOT = b', "text": ""'  # an empty text in a record's line: id first, so the first such bytes


def _record_json(record: dict) -> str:
    """``_json_line(record)`` of a record parsed from JSON (no cycles), without a new encoder each time."""
    return "".join(_c_encoder(record, 0)) if _c_encoder else _json_line(record)


def _record_bytes(record: dict) -> bytes:
    """``_record_json(record).encode("utf-8")`` of a record whose first keys are "id" (a str) and
    "text". The text, most of the line, is escaped on its UTF-8 bytes by bytes.replace (memchr
    scans, ~10x faster than the encoder's per-character loop): a quote, a backslash, newline,
    return and tab are all the escapes json writes for text without rarer control characters
    (ensure_ascii=False writes every other character as itself). UnicodeEncodeError for a lone
    surrogate, as the encoder's line gives."""
    text = record["text"]
    data = text.encode("utf-8")
    if len(data.translate(None, _RARE_CONTROL)) != len(data):  # a C pass, where a regex search took 8x as long
        return _record_json(record).encode("utf-8")
    shell = _record_json({**record, "text": ""}).encode("utf-8")  # keys keep their order
    # Inside an encoded string every quote follows a backslash: the first slot is the text key's.
    at = shell.index(_TEXT_SLOT) + len(_TEXT_SLOT) - 1
    escaped = (data.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
               .replace(b"\r", b"\\r").replace(b"\t", b"\\t"))
    return b"".join((shell[:at], escaped, shell[at:]))


def supported(path: Path) -> bool:
    """Whether trident reads this file (by its name: WARC, HTML or JSONL)."""
    return path.name.lower().endswith(WARC_SUFFIXES + HTML_SUFFIXES + JSONL_SUFFIXES)


def input_format(path: Path) -> str:
    """'warc', 'html' or 'jsonl' from the file name; CurateError for anything else."""
    name = path.name.lower()
    for fmt, suffixes in (("warc", WARC_SUFFIXES), ("html", HTML_SUFFIXES), ("jsonl", JSONL_SUFFIXES)):
        if name.endswith(suffixes):
            return fmt
    known = ", ".join(WARC_SUFFIXES + HTML_SUFFIXES + JSONL_SUFFIXES)
    raise CurateError(f"input '{path}': unsupported file type (expected one of {known})")


def coalesce_inputs(files: list[tuple[Path, str]], sizes: list[int], target_bytes: int) -> list[list[tuple[Path, str]]]:
    """Consecutive input files gathered into groups of about `target_bytes` (each group is read into
    one shard), so many small files make a few shards instead of one each; a file of the target's
    size or more stays alone; target_bytes 0: one group per file. The target shrinks to a
    MIN_GROUPS-th of all the bytes (not below MIN_GROUP_BYTES), so one folder of pages makes work
    for every worker (a 27 MB documentation folder was one group: `--workers 2` left one idle).
    The groups depend on the files alone, never on the number of workers, so the shards and their
    resume markers do not either."""
    if target_bytes <= 0:
        return [[entry] for entry in files]
    target_bytes = min(target_bytes, max(-(-sum(sizes) // MIN_GROUPS), MIN_GROUP_BYTES))
    groups: list[list[tuple[Path, str]]] = []
    held = 0
    for entry, size in zip(files, sizes):
        if not groups or held + size > target_bytes:
            groups.append([])
            held = 0
        groups[-1].append(entry)
        held += size
    return groups


def read_documents(path: Path, log: RecordLog, dataset: str | None = None,
                   max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES, name: str | None = None,
                   ids: DocumentIds | None = None) -> Iterator[Document]:
    """Every document in one input file; bad records go to `log`. Sets meta source/dataset. `name`:
    the file's name in the run (read/inputs.py; default its own name), `ids`: the read task's ids
    so far, which a repeated id is made unique against (read/doc_ids.py)."""
    path = location(path)
    fmt = input_format(path)
    reader = {"warc": _read_warc, "html": _read_html, "jsonl": _read_jsonl}[fmt]
    for doc in reader(path, log, max_doc_bytes, Naming(name or path.name, ids)):
        log.counters["out"] += 1
        yield _tagged(doc, path, dataset)


def _tagged(doc: Document, path: Path, dataset: str | None) -> Document:
    """``doc`` with meta source (the file's name) and dataset, where it has none of its own."""
    doc.meta.setdefault("source", path.name)
    if dataset is not None:
        doc.meta.setdefault("dataset", dataset)
    return doc


def read_shard(path: Path) -> Iterator[Document]:
    """Documents of a shard this package wrote; any bad record raises CurateError (it is our own data)."""
    log = RecordLog(strict=True)
    path = location(path)
    yield from _read_jsonl(path, log, None, Naming(path.name, None))


# ---- JSONL -----------------------------------------------------------------------------------

def _read_jsonl(path: Path, log: RecordLog, max_doc_bytes: int | None, naming: Naming) -> Iterator[Document]:
    try:
        for result in iter_jsonl(path, key=None, max_line_bytes=max_doc_bytes):
            if result.reason == "blank":
                continue
            log.counters["in"] += 1
            doc = _document(path, result, log, naming)
            if doc is not None:
                yield doc
    except UnreadableFile as err:
        # The rest of a truncated or corrupt compressed file is unreadable: one counted loss.
        log.counters["in"] += 1
        log.bad(path, f"line {err.line}", "unreadable_file", err.detail)


def record_lines(path: Path, log: RecordLog, dataset: str | None = None,
                 max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES, name: str | None = None,
                 ids: DocumentIds | None = None) -> Iterator[bytes]:
    """The lines ShardWriter.write writes for ``read_documents(path, log, dataset, max_doc_bytes)``
    of a JSONL file, with the same counts and reports, but no Document or LineResult per good
    record (when no streaming stage needs Documents: half the CPU a record costs to read)."""
    for line, _ in record_items(path, log, dataset, max_doc_bytes, name, ids):
        yield line


def record_items(path: Path, log: RecordLog, dataset: str | None = None,
                 max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES, name: str | None = None,
                 ids: DocumentIds | None = None) -> Iterator[tuple[bytes, dict]]:
    """``record_lines``, each line with its record: the flat JSON object it encodes (Document.to_json's
    form). A line the quick path does not take (blank, too large, not a good record) goes the usual way."""
    path = location(path)
    naming = Naming(name or path.name, ids)
    full, source, counters = str(path), path.name, log.counters
    try:
        for number, raw, size in iter_raw_lines(path, max_doc_bytes):
            item = _quick_line(raw, number, source, dataset, naming)
            if item is not None:
                counters["in"] += 1
                counters["out"] += 1
                yield item
                continue
            result = line_result(full, number, raw, size, None, max_doc_bytes)
            if result.reason == "blank":
                continue
            counters["in"] += 1
            doc = _document(path, result, log, naming)
            if doc is not None:
                counters["out"] += 1
                record = _tagged(doc, path, dataset).to_json()
                yield _json_line(record).encode("utf-8"), record
    except UnreadableFile as err:
        counters["in"] += 1
        log.bad(path, f"line {err.line}", "unreadable_file", err.detail)


def _quick_line(raw: bytes | None, number: int, source: str, dataset: str | None,
                naming: Naming) -> tuple[bytes, dict] | None:
    """(shard line, record) of a good record (a JSON object with a string "text") on line ``number`` of
    the file named ``source``, as Document.from_json, read_documents and ShardWriter.write make it;
    None for any other line."""
    if raw is None:
        return None
    try:
        decoded = raw.decode("utf-8")
        value, end = _scan(decoded, 0)  # leading whitespace or a BOM: StopIteration, as json.loads refuses a BOM
    except (ValueError, StopIteration):  # not UTF-8, not JSON: the usual path names the reason
        return None
    if type(value) is not dict or type(value.get("text")) is not str or decoded[end:].strip(_JSON_SPACE):
        return None
    doc_id = value.get("id")
    record = {"id": None, "text": None}
    record.update(value)  # meta in its order after id and text, whose places are kept
    record["id"] = naming.jsonl(str(doc_id) if doc_id is not None else None, number)
    record.setdefault("source", source)
    if dataset is not None:
        record.setdefault("dataset", dataset)
    try:
        return _record_bytes(record), record
    except UnicodeEncodeError:  # a lone surrogate: the usual path reports or raises as before
        return None


def record_line(doc: Document) -> bytes:
    """The shard line of ``doc`` (its JSON object, UTF-8, no newline)."""
    return _record_bytes(doc.to_json())


def _document(path: Path, result: LineResult, log: RecordLog, naming: Naming) -> Document | None:
    """The Document of one read line, or None after reporting why it is not one."""
    where = f"line {result.line}"
    if result.reason is not None:
        # too_large: name the config key that sets the limit
        detail = f"{result.detail} (max_doc_bytes)" if result.reason == "too_large" else result.detail
        log.bad(path, where, result.reason, detail)
        return None
    try:
        doc = Document.from_json(result.value, default_id="")
        doc.text.encode("utf-8")  # lone surrogates (JSON "\ud800") cannot be written back out
        own = result.value.get("id")
        doc.id = naming.jsonl(str(own) if own is not None else None, result.line)
    except UnicodeEncodeError as err:
        log.bad(path, where, "invalid_unicode", str(err))
        return None
    except ValueError as err:
        log.bad(path, where, "malformed_record", str(err))
        return None
    return doc


# ---- WARC and HTML (trident.curate.read.warc; imported for them only: warcio costs ~0.1 s) -----

def _read_warc(path: Path, log: RecordLog, max_doc_bytes: int, naming: Naming) -> Iterator[Document]:
    from trident.curate.read.warc import read_warc

    yield from read_warc(path, log, max_doc_bytes, naming)


def _read_html(path: Path, log: RecordLog, max_doc_bytes: int, naming: Naming) -> Iterator[Document]:
    from trident.curate.read.charset import decode_html

    log.counters["in"] += 1
    body = path.read_bytes()
    if len(body) > max_doc_bytes:
        log.bad(path, "file", "too_large", f"{len(body)} bytes > max_doc_bytes={max_doc_bytes}")
        return
    text = decode_html(body, "text/html", path, "file", log)
    meta = {"url": str(path) if is_remote(path) else path.resolve().as_uri(), "content_type": "text/html",
            "http_status": 200}
    yield Document(id=naming.file(), text=text, meta=meta)


# ---- writing ---------------------------------------------------------------------------------

class ShardWriter:
    """Writes Documents (or record lines already in their JSON form) to PATH (.jsonl.zst; .jsonl
    with level None) atomically: PATH.tmp is renamed on a clean close.

    Frames of about FRAME_BYTES, each ending at a document and carrying a content checksum, so a
    reader verifies every frame before using it and damage costs only the documents of its frame.
    Lines reach the compressor in blocks of about _BLOCK bytes (one call per line cost more than
    compressing a short document).
    """

    def __init__(self, path: Path, level: int | None = LEVEL) -> None:
        self.path = location(path)
        self._remote = is_remote(self.path)
        make_folder(self.path.parent)
        # an object store commits an object whole at close: no temporary name needed there
        self._tmp = self.path if self._remote else self.path.with_name(self.path.name + ".tmp")
        self._fh = open_write(self._tmp)
        self._zst = None  # level None: plain JSONL (PLAIN_SUFFIX), for work shards read once more
        if level is not None:
            compressor = zstandard.ZstdCompressor(level=level, write_checksum=True)
            self._zst = compressor.stream_writer(self._fh, closefd=False)
        self.count, self._frame_bytes = 0, 0
        self._block: list[bytes] = []
        self._block_bytes = 0

    def write(self, doc: Document) -> None:
        self.write_line(record_line(doc))

    def write_line(self, data: bytes) -> None:
        """Append one record line in its JSON form (without its newline), copied byte for byte."""
        self._block += (data, b"\n")
        self.count += 1
        self._block_bytes += len(data) + 1
        self._frame_bytes += len(data) + 1
        if self._frame_bytes >= FRAME_BYTES and self._zst is not None:
            self._drain()
            self._zst.flush(zstandard.FLUSH_FRAME)
            self._frame_bytes = 0
        elif self._block_bytes >= _BLOCK:
            self._drain()

    def write_joined(self, block: bytes, ends) -> None:
        """Append lines already joined, each with its newline (``ends``: the offset just past each one
        in ``block``, ascending), as ``write_line`` one by one would: the same frames, in a few calls."""
        self._drain()
        view, start = memoryview(block), 0
        while self._zst is not None and start < len(block):
            # write_line ends a frame after the first line that brings it to FRAME_BYTES
            at = int(np.searchsorted(ends, start + FRAME_BYTES - self._frame_bytes, "left"))
            if at == len(ends):
                break
            self._zst.write(view[start : ends[at]])
            self._zst.flush(zstandard.FLUSH_FRAME)
            start, self._frame_bytes = int(ends[at]), 0
        (self._fh if self._zst is None else self._zst).write(view[start:])
        self._frame_bytes += len(block) - start
        self.count += len(ends)

    def _drain(self) -> None:
        if self._block:
            (self._fh if self._zst is None else self._zst).write(b"".join(self._block))
            self._block, self._block_bytes = [], 0

    def close(self) -> None:
        self._drain()
        if self._zst is not None:
            self._zst.close()
        if self._remote:
            self._fh.close()
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        if self._remote:
            self._fh.discard()  # the upload is dropped: no object appears
            return
        self._fh.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.abort() if exc_type is not None else self.close()


def write_shard(path: Path, docs, level: int = LEVEL) -> int:
    """Write all `docs` to a JSONL.zst shard (zstd ``level``); returns how many were written."""
    with ShardWriter(path, level) as writer:
        for doc in docs:
            writer.write(doc)
    return writer.count


def write_lines(path: Path, lines, level: int = LEVEL) -> int:
    """Write record lines already in their JSON form (``record_lines``) to a JSONL.zst shard."""
    with ShardWriter(path, level) as writer:
        for line in lines:
            writer.write_line(line)
    return writer.count
