"""The decompressed bytes of a .gz or .zst file, released only once their checksum verifies.

Each gzip member / zstd frame is decompressed in bounded pieces and held until its end, where the
format's checksum (gzip CRC-32 and length; zstd content checksum, when the frame has one) is
checked; only then are its bytes handed on. A member/frame that fails its checksum, is corrupt or
is cut off raises DamagedData. A failed checksum or corrupt data delivers none of the member's/frame's
bytes, so garbled documents never reach a reader; a cut-off file delivers what inflated before the
cut (a cut changes no earlier byte). Limit: a member/frame larger than HOLD_LIMIT decompressed bytes is handed on in
pieces before its end can be checked (trident's own shards use small frames; see curate/read/shards.py).
"""
from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Callable, Iterator

import zstandard

from trident.text.storage import location, open_read

HOLD_LIMIT = 8 << 20  # decompressed bytes held per member/frame while waiting for its checksum
_READ = 1 << 16  # compressed bytes read at a time
# compressed bytes per zstd call (zstd has no output cap): small where the data inflates a lot
_PIECE_MIN, _PIECE_MAX = 16, 1024
_OUT = 1 << 20  # decompressed bytes per gzip call


class DamagedData(OSError):
    """A member/frame failed its checksum, is corrupt, or the file ends inside it."""


def _gzip_parts(fh) -> Iterator[tuple[bytes, bool]]:
    """(decompressed piece, whether it ends a verified member) for every gzip member in turn."""
    obj, pending, started = zlib.decompressobj(31), b"", False
    while True:
        if not pending:
            pending = fh.read(_READ)
            if not pending:
                break
        started = True
        out = obj.decompress(pending, _OUT)  # zlib checks CRC-32 and length at the member's end
        if obj.eof:
            yield out, True
            # concatenated members (and gzip's optional zero padding after the last one); the rest
            # is all in unused_data (CPython may repeat it in unconsumed_tail: never take both)
            pending = obj.unused_data.lstrip(b"\0")
            obj, started = zlib.decompressobj(31), bool(pending)
            continue
        pending = obj.unconsumed_tail
        if out:
            yield out, False
    if started:
        tail = obj.flush()
        if not obj.eof:
            raise EOFError("gzip stream ended inside a member (truncated file)")
        yield tail, True


def _zstd_parts(fh) -> Iterator[tuple[bytes, bool]]:
    """(decompressed piece, whether it ends a verified frame) for every zstd frame in turn."""
    obj, started, size = zstandard.ZstdDecompressor().decompressobj(), False, _PIECE_MIN
    while raw := fh.read(_READ):
        pos = 0
        while pos < len(raw):
            started = True
            piece = raw[pos:pos + size]
            out = obj.decompress(piece)  # libzstd checks the content checksum at the frame's end
            pos += len(piece)
            # aim at ~_OUT bytes a call: one call's output stays bounded even for a decompression bomb
            size = max(_PIECE_MIN, min(_PIECE_MAX, 2 * size, _OUT * len(piece) // max(1, len(out))))
            if obj.eof:
                pos -= len(obj.unused_data)
                yield out, True
                # shards are often written by concatenating zstd frames: start the next one
                obj, started = zstandard.ZstdDecompressor().decompressobj(), False
            elif out:
                yield out, False
    if started:
        raise EOFError("zstd stream ended inside a frame (truncated file)")


def _verified(parts: Iterator[tuple[bytes, bool]], unit: str) -> Iterator[bytes]:
    """The pieces of each member/frame once it verified; DamagedData (with how many lines were
    dropped) when one fails; at a cut, what came before it and then DamagedData."""
    held: list[bytearray] = []
    size = 0
    try:
        for data, end in parts:
            if held and len(held[-1]) < _OUT:
                held[-1] += data  # few, large pieces for the reader
            else:
                held.append(bytearray(data))
            size += len(data)
            if end or size > HOLD_LIMIT:
                yield from held
                held, size = [], 0
    except EOFError as err:
        # a cut leaves the bytes before it intact: what inflated before it is kept
        yield from held
        raise DamagedData(f"EOFError: {err}") from err
    except (zlib.error, zstandard.ZstdError) as err:
        lines = sum(piece.count(b"\n") for piece in held)
        raise DamagedData(f"{type(err).__name__}: {err}; the {unit}'s {size} decompressed bytes "
                          f"({lines} lines) dropped") from err


class _Reader(io.RawIOBase):
    """Verified decompressed bytes as a raw stream (for io.BufferedReader)."""

    def __init__(self, path: Path, parts: Callable, unit: str) -> None:
        self._file = open_read(path)
        self._chunks = _verified(parts(self._file), unit)
        self._chunk, self._pos = memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._pos >= len(self._chunk):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk, self._pos = memoryview(chunk), 0
        n = min(len(buffer), len(self._chunk) - self._pos)
        buffer[:n] = self._chunk[self._pos:self._pos + n]
        self._pos += n
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def open_binary(path) -> io.BufferedIOBase:
    """A binary stream of the file's decompressed, verified bytes (gzip and zstd by suffix)."""
    path = location(path)
    name = path.name.lower()
    if name.endswith(".gz"):
        return io.BufferedReader(_Reader(path, _gzip_parts, "gzip member"), buffer_size=_OUT)
    if name.endswith(".zst"):
        return io.BufferedReader(_Reader(path, _zstd_parts, "zstd frame"), buffer_size=_OUT)
    return open_read(path)
