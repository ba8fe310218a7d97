"""Reading input shards (WARC, HTML files, JSONL[.gz|.zst]) as Documents, and writing JSONL.zst.

Readers never raise on a bad record: they report it to a `RecordLog` (file, position, reason),
which counts it and, in strict mode, raises CurateError instead. Positions are 1-based line
numbers for JSONL, byte offsets of the record for WARC.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Iterator

import zstandard
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from trident.curate.document import CurateError, Document
from trident.text.jsonl import DEFAULT_MAX_DOC_BYTES, LineResult, UnreadableFile, iter_jsonl
from trident.text.storage import is_remote, location, make_folder, open_read, open_write

SHARD_SUFFIX = ".jsonl.zst"
WARC_SUFFIXES = (".warc", ".warc.gz")
HTML_SUFFIXES = (".html", ".htm")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst")
WARC_TYPES = ("warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion", "continuation")
FRAME_BYTES = 1 << 20  # uncompressed bytes per zstd frame of a written shard (well under HOLD_LIMIT)
_MAX_LOGGED = 200  # error examples kept per log; all of them are counted


class RecordLog:
    """Counts what a reader saw ("in", "out", "dropped:<reason>") and keeps bad-record examples."""

    def __init__(self, strict: bool = False, drops=None) -> None:
        self.strict = strict
        self.counters: Counter = Counter()
        self.errors: list[dict] = []
        self.drops = drops  # a curate.droplog.DropLog: every dropped record, not only the examples

    def bad(self, file: Path | str, position: int | str, reason: str, detail: str, dropped: bool = True) -> None:
        """Report a bad record; counts `dropped:<reason>` (or `repaired:<reason>` when it was kept)."""
        if self.strict:
            raise CurateError(f"{file}: record at {position}: {reason}: {detail} (strict mode)")
        self.counters[f"{'dropped' if dropped else 'repaired'}:{reason}"] += 1
        if dropped and self.drops is not None:
            self.drops.add("", "", "read", reason, position=f"{file} {position}", detail=detail[:300])
        if len(self.errors) < _MAX_LOGGED:
            self.errors.append({"file": str(file), "position": position, "reason": reason, "detail": detail[:300]})


def input_format(path: Path) -> str:
    """'warc', 'html' or 'jsonl' from the file name; CurateError for anything else."""
    name = path.name.lower()
    for fmt, suffixes in (("warc", WARC_SUFFIXES), ("html", HTML_SUFFIXES), ("jsonl", JSONL_SUFFIXES)):
        if name.endswith(suffixes):
            return fmt
    known = ", ".join(WARC_SUFFIXES + HTML_SUFFIXES + JSONL_SUFFIXES)
    raise CurateError(f"input '{path}': unsupported file type (expected one of {known})")


def read_documents(path: Path, log: RecordLog, dataset: str | None = None,
                   max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES) -> Iterator[Document]:
    """Every document in one input file; bad records go to `log`. Sets meta source/dataset."""
    path = location(path)
    fmt = input_format(path)
    reader = {"warc": _read_warc, "html": _read_html, "jsonl": _read_jsonl}[fmt]
    for doc in reader(path, log, max_doc_bytes):
        doc.meta.setdefault("source", path.name)
        if dataset is not None:
            doc.meta.setdefault("dataset", dataset)
        log.counters["out"] += 1
        yield doc


def read_shard(path: Path) -> Iterator[Document]:
    """Documents of a shard this package wrote; any bad record raises CurateError (it is our own data)."""
    log = RecordLog(strict=True)
    yield from _read_jsonl(location(path), log, max_doc_bytes=None)


# ---- JSONL -----------------------------------------------------------------------------------

def _read_jsonl(path: Path, log: RecordLog, max_doc_bytes: int | None) -> Iterator[Document]:
    try:
        for result in iter_jsonl(path, key=None, max_line_bytes=max_doc_bytes):
            if result.reason == "blank":
                continue
            log.counters["in"] += 1
            doc = _document(path, result, log)
            if doc is not None:
                yield doc
    except UnreadableFile as err:
        # The rest of a truncated or corrupt compressed file is unreadable: one counted loss.
        log.counters["in"] += 1
        log.bad(path, f"line {err.line}", "unreadable_file", err.detail)


def _document(path: Path, result: LineResult, log: RecordLog) -> Document | None:
    """The Document of one read line, or None after reporting why it is not one."""
    where = f"line {result.line}"
    if result.reason is not None:
        # too_large: name the config key that sets the limit
        detail = f"{result.detail} (max_doc_bytes)" if result.reason == "too_large" else result.detail
        log.bad(path, where, result.reason, detail)
        return None
    try:
        doc = Document.from_json(result.value, default_id=f"{path.name}:{result.line}")
        doc.text.encode("utf-8")  # lone surrogates (JSON "\ud800") cannot be written back out
    except UnicodeEncodeError as err:
        log.bad(path, where, "invalid_unicode", str(err))
        return None
    except ValueError as err:
        log.bad(path, where, "malformed_record", str(err))
        return None
    return doc


# ---- HTML and WARC ---------------------------------------------------------------------------

def _decode_html(body: bytes, content_type: str, path: Path, where: str, log: RecordLog) -> str:
    """Declared charset, else UTF-8; undecodable bytes are replaced and reported (kept, counted)."""
    charset = None
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip("\"' ")
    for encoding in filter(None, (charset, "utf-8")):
        try:
            return body.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
    log.bad(path, where, "invalid_utf8", "undecodable bytes replaced with U+FFFD", dropped=False)
    return body.decode("utf-8", errors="replace")


def _read_html(path: Path, log: RecordLog, max_doc_bytes: int) -> Iterator[Document]:
    log.counters["in"] += 1
    body = path.read_bytes()
    if len(body) > max_doc_bytes:
        log.bad(path, "file", "too_large", f"{len(body)} bytes > max_doc_bytes={max_doc_bytes}")
        return
    text = _decode_html(body, "text/html", path, "file", log)
    meta = {"url": str(path) if is_remote(path) else path.resolve().as_uri(), "content_type": "text/html",
            "http_status": 200}
    yield Document(id=path.name, text=text, meta=meta)


def _read_warc(path: Path, log: RecordLog, max_doc_bytes: int) -> Iterator[Document]:
    with open_read(path) as fh:
        records = ArchiveIterator(fh, check_digests=False)
        offset: int | str = 0
        try:
            for record in records:
                offset = records.offset  # get_record_offset() would consume the record body
                if record.rec_type not in WARC_TYPES:
                    log.counters["in"] += 1
                    log.bad(path, f"byte {offset}", "malformed_warc_record", f"WARC-Type {record.rec_type!r}")
                    continue
                if record.rec_type not in ("response", "resource"):
                    log.counters[f"skipped_records:{record.rec_type}"] += 1
                    continue
                log.counters["in"] += 1
                doc = _warc_document(path, offset, record, log, max_doc_bytes)
                if doc is not None:
                    yield doc
        except (ArchiveLoadFailed, EOFError, OSError, ValueError, zstandard.ZstdError) as err:
            # warcio cannot resynchronise after a corrupt record: the rest of the file is one loss.
            log.counters["in"] += 1
            log.bad(path, f"after byte {offset}", "unreadable_warc", f"{type(err).__name__}: {err}")
            return
    size = path.stat().st_size
    if records.offset < size:
        # warcio ends quietly at a cut-off gzip member; bytes left over mean a lost record.
        log.counters["in"] += 1
        log.bad(path, f"byte {records.offset}", "unreadable_warc",
                f"{size - records.offset} trailing bytes are not a complete WARC record (truncated file?)")


def _read_limited(stream, limit: int) -> bytes:
    """Up to `limit` bytes (warcio's readers return short or empty reads for large sizes)."""
    parts, size = [], 0
    while size < limit:
        chunk = stream.read(min(65536, limit - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def _warc_document(path: Path, offset: int, record, log: RecordLog, max_doc_bytes: int) -> Document | None:
    where = f"byte {offset}"
    headers = record.rec_headers
    url = headers.get_header("WARC-Target-URI") or ""
    if record.rec_type == "response" and record.http_headers is not None:
        status = int(record.http_headers.get_statuscode() or 0)
        content_type = record.http_headers.get_header("Content-Type") or ""
    else:
        status, content_type = 200, headers.get_header("Content-Type") or ""
    body = _read_limited(record.content_stream(), max_doc_bytes + 1)
    if len(body) > max_doc_bytes:
        log.bad(path, where, "too_large", f"record body > max_doc_bytes={max_doc_bytes}")
        return None
    missing = getattr(record.raw_stream, "limit", 0)
    if missing > 0:
        log.bad(path, where, "truncated_record", f"record ends {missing} bytes before its Content-Length")
        return None
    is_html = "html" in content_type.lower()
    # Only HTML bodies become text; the extract stage drops (and counts) the others.
    text = _decode_html(body, content_type, path, where, log) if is_html and status == 200 else ""
    record_id = (headers.get_header("WARC-Record-ID") or f"{path.name}@{offset}").strip("<>")
    meta = {"url": url, "content_type": content_type, "http_status": status,
            "warc_date": headers.get_header("WARC-Date") or ""}
    return Document(id=record_id, text=text, meta=meta)


# ---- writing ---------------------------------------------------------------------------------

class ShardWriter:
    """Writes Documents to PATH (.jsonl.zst) atomically: PATH.tmp is renamed on a clean close.

    Frames of about FRAME_BYTES, each ending at a document and carrying a content checksum, so a
    reader verifies every frame before using it and damage costs only the documents of its frame.
    """

    def __init__(self, path: Path, level: int = 3) -> None:
        self.path = location(path)
        self._remote = is_remote(self.path)
        make_folder(self.path.parent)
        # an object store commits an object whole at close: no temporary name needed there
        self._tmp = self.path if self._remote else self.path.with_name(self.path.name + ".tmp")
        self._fh = open_write(self._tmp)
        compressor = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self._zst = compressor.stream_writer(self._fh, closefd=False)
        self.count, self._frame_bytes = 0, 0

    def write(self, doc: Document) -> None:
        line = (json.dumps(doc.to_json(), ensure_ascii=False) + "\n").encode("utf-8")
        self._zst.write(line)
        self.count += 1
        self._frame_bytes += len(line)
        if self._frame_bytes >= FRAME_BYTES:
            self._zst.flush(zstandard.FLUSH_FRAME)
            self._frame_bytes = 0

    def close(self) -> None:
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


def write_shard(path: Path, docs) -> int:
    """Write all `docs` to a JSONL.zst shard; returns how many were written."""
    with ShardWriter(path) as writer:
        for doc in docs:
            writer.write(doc)
    return writer.count
