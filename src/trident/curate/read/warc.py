"""WARC records (.warc, .warc.gz) as Documents, where damage costs only the damaged record.

warcio parses each record's WARC header and HTTP block; the framing and resynchronisation are
trident.curate.read.warc_stream's. Every response/resource record counts `in` and becomes a Document or
a `dropped:<reason>` with file and byte offset (of its gzip member in a .warc.gz, as in Common
Crawl's index; of the record in a .warc):
  malformed_warc_record  the WARC header cannot be parsed, lacks a Content-Length, names an unknown
                         WARC-Type, or the block is not followed by a blank line
  bad_http_block         a response's HTTP block does not start with an "HTTP/x NNN" status line,
                         or its body cannot be decoded
  damaged_gzip_member    the record's gzip member fails to inflate or its CRC
  truncated_record       the file ends inside the record
  too_large              the body is over max_doc_bytes (a rule, not damage)
A damaged record of another type (request, metadata, ...) is counted the same way, since which type
it was may be unreadable. Other types are counted as `skipped_records:<type>`. A document is handed on
only after its record (and, in a .warc.gz, its member's CRC) checked out.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from warcio.exceptions import ArchiveLoadFailed
from warcio.recordloader import ArcWarcRecordLoader
from warcio.statusandheaders import StatusAndHeadersParserException

from trident.curate.document import Document
from trident.curate.read.charset import decode_html
from trident.curate.read.doc_ids import Naming
from trident.curate.read.record_log import RecordLog
from trident.curate.read.warc_stream import Damaged, DamagedMember, WarcStream
from trident.text.storage import open_read

WARC_TYPES = ("warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion", "continuation")
_DOCUMENT_TYPES = ("response", "resource")
_DRAIN = 1 << 20  # bytes read at a time when skipping the rest of a block


def read_warc(path: Path, log: RecordLog, max_doc_bytes: int, naming: Naming | None = None) -> Iterator[Document]:
    """The Documents of one WARC file's response and resource records; bad records go to `log`. Each
    document's id is its record's URI, made unique by `naming` (read/doc_ids.py)."""
    with open_read(path) as fh:
        file = _WarcFile(path, log, max_doc_bytes, WarcStream(fh, path.name))
        file.naming = naming or file.naming
        yield from file.documents()


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


class _WarcFile:
    """The record loop over one file: parse, check, count; on damage count and resynchronise."""

    def __init__(self, path: Path, log: RecordLog, max_doc_bytes: int, stream: WarcStream) -> None:
        self.path, self.log, self.max_doc_bytes, self.stream = path, log, max_doc_bytes, stream
        self.loader = ArcWarcRecordLoader(verify_http=False, arc2warc=False)
        self.offset = 0  # of the record at hand
        self.counted = False  # whether the record at hand has been counted `in`
        self.naming = Naming(path.name, None)  # how documents are named (read_warc sets the task's)

    def documents(self) -> Iterator[Document]:
        damage, lost_at = None, None
        while True:
            self.counted = False
            try:
                if damage is not None:
                    self.stream.resync(damage)
                    damage = None
                if not self.stream.at_record():
                    return
                self.offset = self.stream.record_offset()
                doc = self._record()
            except Damaged as err:
                where = err.offset if isinstance(err, DamagedMember) else self.offset
                # a resync that runs into the damaged member of the record just counted: counted already
                if damage is None or where != lost_at:
                    self._drop(where, err.reason, err.detail)
                damage, lost_at = err, where
                continue
            if doc is not None:
                yield doc

    def _drop(self, offset: int, reason: str, detail: str) -> None:
        if not self.counted:
            self.log.counters["in"] += 1
        self.log.bad(self.path, f"byte {offset}", reason, detail)

    def _record(self) -> Document | None:
        """The next record's Document, or None (skipped, or dropped and counted); Damaged when the
        record's framing is broken."""
        record = self._parse()
        kind = record.rec_type
        payload, problem = None, None
        if kind in _DOCUMENT_TYPES:
            self.counted = True
            self.log.counters["in"] += 1
            payload, problem = self._payload(record)
        elif kind not in WARC_TYPES:
            problem = ("malformed_warc_record", f"WARC-Type {kind!r}")
        while record.raw_stream.read(_DRAIN):
            pass
        if record.raw_stream.limit > 0:
            raise Damaged("truncated_record", f"the file ends {record.raw_stream.limit} bytes before "
                                              f"the record's Content-Length does")
        self.stream.end_record()
        if problem is not None:
            self._drop(self.offset, *problem)
            return None
        if payload is None:
            self.log.counters[f"skipped_records:{kind}"] += 1
            return None
        return self._document(record, *payload)

    def _parse(self):
        """The record's WARC header parsed (its block not read); Damaged when it cannot be."""
        try:
            record = self.loader.parse_record_stream(self.stream, known_format="warc", no_record_parse=True)
        except (ArchiveLoadFailed, StatusAndHeadersParserException, EOFError, ValueError) as err:
            raise Damaged("malformed_warc_record", f"WARC header: {err}") from None
        length = (record.rec_headers.get_header("Content-Length") or "").strip()
        if not (length.isascii() and length.isdigit()):
            # without a length the record's end is unknown: resynchronise at the next "WARC/1."
            raise Damaged("malformed_warc_record", f"Content-Length {length!r} is not a byte count")
        return record

    def _payload(self, record) -> tuple[tuple[int, str, bytes] | None, tuple[str, str] | None]:
        """((HTTP status, content type, body), None), or (None, (reason, detail)) when unusable."""
        status, content_type = 200, record.content_type or ""  # the WARC header's, unless HTTP gives one
        if record.rec_type == "response":
            uri = record.rec_headers.get_header("WARC-Target-URI") or ""
            try:
                http = self.loader.load_http_headers("response", uri, record.raw_stream, record.length)
            except EOFError:  # the file ends where the block should be: the truncation check counts it
                return None, ("truncated_record", "the file ends before the HTTP block")
            if http is not None:
                code = http.get_statuscode()
                if not (http.protocol.upper().startswith("HTTP/") and len(code) == 3 and code.isascii()
                        and code.isdigit()):
                    line = f"{http.protocol} {http.statusline}"[:80]
                    return None, ("bad_http_block", f"not an HTTP status line: {line!r}")
                record.http_headers = http
                status, content_type = int(code), http.get_header("Content-Type") or ""
        try:
            body = _read_limited(record.content_stream(), self.max_doc_bytes + 1)
        except (ValueError, EOFError) as err:
            return None, ("bad_http_block", f"body cannot be decoded: {err}")
        if len(body) > self.max_doc_bytes:
            return None, ("too_large", f"record body > max_doc_bytes={self.max_doc_bytes}")
        return (status, content_type, body), None

    def _document(self, record, status: int, content_type: str, body: bytes) -> Document:
        where, headers = f"byte {self.offset}", record.rec_headers
        # Only HTML bodies become text; the extract stage drops (and counts) the others.
        is_html = "html" in content_type.lower()
        text = decode_html(body, content_type, self.path, where, self.log) if is_html and status == 200 else ""
        record_id = (headers.get_header("WARC-Record-ID") or "").strip().strip("<>")
        uri = (headers.get_header("WARC-Target-URI") or "").strip()
        meta = {"url": uri, "content_type": content_type, "http_status": status,
                "warc_date": headers.get_header("WARC-Date") or ""}
        return Document(id=self.naming.warc(uri, record_id, self.offset), text=text, meta=meta)
