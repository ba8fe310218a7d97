"""The bytes of a WARC file (.warc, or .warc.gz inflated member by member) for warcio to parse, with
the framing warcio lacks: where each record starts, and where reading resumes after damage.

A .warc.gz is inflated gzip member by member (Common Crawl writes one record per member); a member
that fails to inflate or its CRC, or that the file ends inside, raises DamagedMember with the member's
offset, and `resync` moves to the next gzip header after that member's start whose first inflated
bytes are "WARC/1." (a candidate that is not is noise inside the damaged member). Any other damage
(a bad WARC header, a Content-Length that does not end the record) raises Damaged, and `resync` moves
to the next line starting "WARC/1.", in a .warc as inside a member. Whether a file is gzipped is read
from its first bytes, its name deciding only when they are neither a gzip header nor "WARC/".
Memory stays bounded: buffers of _OUT inflated / _READ compressed bytes, and at most _KEEP
compressed bytes of one member kept for a rescan (beyond that a rescan starts where reading was).
"""
from __future__ import annotations

import sys
import zlib

_READ = 1 << 16  # compressed bytes read at a time
_FEED = 1 << 13  # compressed bytes per zlib call: Common Crawl's members are a few KiB, a bigger feed
# would copy (and leave as unused_data) mostly the next members' bytes
_PLAIN_READ = 1 << 20  # bytes of a plain .warc read at a time
_OUT = 1 << 20  # inflated bytes per zlib call: bounded even for a decompression bomb
_MAX_LINE = 1 << 20  # a longer header "line" is returned in pieces (it is damage, never a real header)
_KEEP = 16 << 20  # compressed bytes of one member kept so that a rescan can start at its beginning
_PROBE = 4096  # compressed bytes tried at a candidate gzip header
_GZIP_MAGIC = b"\x1f\x8b\x08"
RECORD_START = b"WARC/1."


class Damaged(Exception):
    """A record cannot be read; `reason` names its dropped:<reason> counter."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class DamagedMember(Damaged):
    """A gzip member cannot be inflated, or the file ends inside it; `offset` is where it starts."""

    def __init__(self, reason: str, detail: str, offset: int) -> None:
        super().__init__(reason, detail)
        self.offset = offset


def _starts_record(data: bytes) -> bool:
    """Whether `data` begins a gzip member whose first inflated bytes start a WARC record."""
    try:
        return zlib.decompressobj(31).decompress(data, len(RECORD_START)) == RECORD_START
    except zlib.error:
        return False


class WarcStream:
    """read/readline over the WARC bytes of the open binary file `fh` (gzip detected), plus
    at_record / record_offset / end_record / resync for the record loop."""

    def __init__(self, fh, name: str) -> None:
        self._fh = fh
        self._buf, self._pos = b"", 0
        self._buf_offset = 0  # plain: file offset of _buf[0]; gzipped: offset of the member _buf is from
        self._raw = bytearray(fh.read(_READ))  # gzipped: compressed bytes from file offset _raw_offset on
        self._raw_offset, self._fed = 0, 0  # _fed: bytes of _raw given to the current member's inflater
        self._member = None  # the inflater of the member being read; None between members
        self._member_offset = 0
        head = bytes(self._raw[:len(RECORD_START)])
        self.gzipped = head.startswith(_GZIP_MAGIC[:2]) or (not head.startswith(b"WARC/")
                                                            and name.lower().endswith(".gz"))
        if not self.gzipped:
            self._buf, self._raw = bytes(self._raw), bytearray()

    # ---- what warcio calls ----------------------------------------------------------------

    def readline(self, limit: int | None = -1) -> bytes:
        limit = _MAX_LINE if limit is None or limit < 0 else min(limit, _MAX_LINE)
        buf, pos = self._buf, self._pos
        end = buf.find(b"\n", pos, pos + limit)
        if end >= 0:  # the common case, a whole line in the buffer
            self._pos = end + 1
            return buf[pos:end + 1]
        parts = []
        while limit > 0 and self._ensure():
            buf, pos = self._buf, self._pos
            end = buf.find(b"\n", pos, pos + limit)
            stop = end + 1 if end >= 0 else min(len(buf), pos + limit)
            parts.append(buf[pos:stop])
            limit -= stop - pos
            self._pos = stop
            if end >= 0:
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, size: int | None = -1) -> bytes:
        remaining = sys.maxsize if size is None or size < 0 else size
        if self._pos + remaining <= len(self._buf):  # the common case, all of it in the buffer
            self._pos += remaining
            return self._buf[self._pos - remaining:self._pos]
        parts = []
        while remaining > 0 and self._ensure():
            pos = self._pos
            stop = min(len(self._buf), pos + remaining)
            parts.append(self._buf[pos:stop])
            remaining -= stop - pos
            self._pos = stop
        return parts[0] if len(parts) == 1 else b"".join(parts)

    # ---- records ---------------------------------------------------------------------------

    def at_record(self) -> bool:
        """Skip the blank lines between records: True at a record's first byte, False at the end."""
        while self._ensure():
            if self._buf[self._pos] not in b"\r\n":
                return True
            self._pos += 1
        return False

    def record_offset(self) -> int:
        """The file offset of the record at hand: its gzip member's (.warc.gz), its own (.warc)."""
        return self._buf_offset if self.gzipped else self._buf_offset + self._pos

    def end_record(self) -> None:
        """After a record's block: skip the blank lines closing it (in a .warc.gz up to its member's
        end, whose CRC is then verified). Damaged when the block is not followed by a blank line."""
        byte = self._peek()
        if byte is not None and byte not in b"\r\n":
            raise Damaged("malformed_warc_record", "its block is not followed by a blank line "
                                                   "(Content-Length wrong?)")
        while byte is not None and byte in b"\r\n":
            self._pos += 1
            byte = self._peek()

    def resync(self, damage: Damaged) -> None:
        """Move to where the next record should start after `damage` (or to the end of the file)."""
        if isinstance(damage, DamagedMember):
            self._next_member(damage.offset)
        else:
            self._next_record_line()

    # ---- buffers ---------------------------------------------------------------------------

    def _ensure(self) -> bool:
        """At least one unread byte in the buffer; False at the end of the file."""
        return self._pos < len(self._buf) or self._fill()

    def _fill(self) -> bool:
        """Replace the read-out buffer with the next bytes; False at the end of the file."""
        if not self.gzipped:
            self._buf_offset += len(self._buf)
            self._buf, self._pos = self._fh.read(_PLAIN_READ), 0
            return bool(self._buf)
        while True:
            if self._member is None and not self._start_member():
                return False
            data = self._inflate()
            if data:
                self._buf, self._pos, self._buf_offset = data, 0, self._member_offset
                return True

    def _peek(self) -> int | None:
        """The next byte, not consumed; None at the end of the file, or (gzipped) of the member."""
        while self._pos >= len(self._buf):
            if not self.gzipped:
                if not self._fill():
                    return None
            elif self._member is None:
                return None
            elif data := self._inflate():
                self._buf, self._pos, self._buf_offset = data, 0, self._member_offset
        return self._buf[self._pos]

    # ---- gzip members ----------------------------------------------------------------------

    def _read_raw(self) -> bool:
        data = self._fh.read(_READ)
        if not data:
            return False
        if self._fed > _KEEP:  # a huge member: forget its start (a rescan then starts here)
            self._compact(self._fed)
        self._raw += data
        return True

    def _compact(self, count: int) -> None:
        """Forget the first `count` compressed bytes held."""
        del self._raw[:count]
        self._raw_offset += count
        self._fed = max(0, self._fed - count)

    def _start_member(self) -> bool:
        """Begin the gzip member at hand (after gzip's optional zero padding); False at the end."""
        self._compact(self._fed)
        while not self._raw or self._raw[0] == 0:
            if not self._raw and not self._read_raw():
                return False
            self._compact(len(self._raw) - len(self._raw.lstrip(b"\0")))
        self._member_offset, self._member = self._raw_offset, zlib.decompressobj(31)
        return True

    def _inflate(self) -> bytes:
        """The member's next inflated bytes; b"" once its end and CRC checked out (member None)."""
        member = self._member
        try:
            while True:
                if self._fed == len(self._raw) and not self._read_raw():
                    out = member.flush()  # what zlib can still give from the input it holds
                    if not member.eof:
                        raise DamagedMember("truncated_record", "the file ends inside this gzip member "
                                                                "(cut off?)", self._member_offset)
                    break
                chunk = self._raw[self._fed:self._fed + _FEED]
                out = member.decompress(chunk, _OUT)
                # at the member's end zlib leaves the rest in unused_data (and may repeat it in unconsumed_tail)
                self._fed += len(chunk) - len(member.unused_data if member.eof else member.unconsumed_tail)
                if member.eof or out:
                    break
        except zlib.error as err:
            raise DamagedMember("damaged_gzip_member", f"gzip: {err}", self._member_offset) from None
        if member.eof:
            self._member = None
        return out

    def _next_member(self, damaged_at: int) -> None:
        """Skip to the first gzip header after `damaged_at` that inflates to a WARC record."""
        self._member, self._buf, self._pos, self._fed = None, b"", 0, 0
        index = max(damaged_at + 1 - self._raw_offset, 0)
        while True:
            hit = self._raw.find(_GZIP_MAGIC, index)
            if hit < 0:
                self._compact(max(len(self._raw) - len(_GZIP_MAGIC) + 1, 0))  # keep a split magic
                index = 0
                if not self._read_raw():
                    self._compact(len(self._raw))
                    return
                continue
            while len(self._raw) - hit < _PROBE and self._read_raw():
                pass
            if _starts_record(bytes(self._raw[hit:hit + _PROBE])):
                self._compact(hit)
                return
            index = hit + 1

    def _next_record_line(self) -> None:
        """Skip to the next line that starts a WARC record, or to the end of the file."""
        while self._ensure():
            offset = self.record_offset()
            line = self.readline()
            if line.startswith(RECORD_START):
                # put the line back: the record starts with it
                self._buf, self._pos, self._buf_offset = line + self._buf[self._pos:], 0, offset
                return
