"""Shingles and their 64-bit hashes, one document at a time: the reference that MinHash signatures,
the batched shingling (shingle_batch.py) and the compiled loops (kernels/) all compute the same
hashes as (minhash.py's docstring states the rules).
"""
from __future__ import annotations

import numpy as np
import xxhash

from trident.curate.dedup.components import sorted_distinct

EMPTY_HASHES = np.zeros(0, dtype=np.uint64)


def normalize_for_shingles(text: str) -> str:
    """Lower-case and collapse whitespace runs to single spaces (stripped)."""
    return " ".join(text.lower().split())


def shingles(text: str, ngram: int = 5, unit: str = "char") -> set[str]:
    """The distinct shingles of ``text`` after :func:`normalize_for_shingles`."""
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    norm = normalize_for_shingles(text)
    if unit == "char":
        if not norm:
            return set()
        if len(norm) <= ngram:
            return {norm}
        return {norm[i : i + ngram] for i in range(len(norm) - ngram + 1)}
    if unit == "word":
        words = norm.split(" ") if norm else []
        if not words:
            return set()
        if len(words) <= ngram:
            return {" ".join(words)}
        return {" ".join(words[i : i + ngram]) for i in range(len(words) - ngram + 1)}
    raise ValueError(f"shingle unit must be 'char' or 'word', got {unit!r}")


# XXH64 constants (github.com/Cyan4973/xxHash, xxhash.h).
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_MASK64 = (1 << 64) - 1


def _rotl(x: np.ndarray, r: int, spare: np.ndarray) -> np.ndarray:
    """Rotate ``x`` left by ``r`` bits in place (``spare``: scratch of the same shape)."""
    np.right_shift(x, np.uint64(64 - r), out=spare)
    np.left_shift(x, np.uint64(r), out=x)
    x |= spare
    return x


def _window_readers(data: bytes, starts: np.ndarray | None, width: int):
    """(count, at, read): ``at(o)`` is byte o of every slice, ``read(o, n)`` its n-byte word (uint64)."""
    if starts is None:
        count = max(0, len(data) - width + 1)

        def at(offset: int) -> np.ndarray:  # byte `offset` of every window: a contiguous slice
            return np.frombuffer(data, dtype=np.uint8, count=count, offset=offset).astype(np.uint64)

        def read(offset: int, nbytes: int) -> np.ndarray:  # overlapping unaligned view: one load
            view = np.ndarray((count,), dtype=f"<u{nbytes}", buffer=data, offset=offset, strides=(1,))
            return view.astype(np.uint64)

        return count, at, read
    buf = np.frombuffer(data, dtype=np.uint8).astype(np.uint64)
    starts = np.asarray(starts, dtype=np.int64)
    if len(starts) and (starts.min() < 0 or starts.max() + width > len(buf)):
        raise ValueError(f"slices of width {width} run outside the {len(buf)}-byte buffer")

    def gather(offset: int) -> np.ndarray:
        return buf[starts + offset]

    def word(offset: int, nbytes: int) -> np.ndarray:  # little-endian word at start + offset
        out = gather(offset).copy()
        for k in range(1, nbytes):
            out |= gather(offset + k) << np.uint64(8 * k)
        return out

    return len(starts), gather, word


def xxh64_slices(data: bytes, starts: np.ndarray | None, width: int, seed: int = 0) -> np.ndarray:
    """``xxhash.xxh64_intdigest(data[s:s+width], seed)`` for every s in ``starts`` (None: every
    window 0, 1, ..., len - width), computed at once.

    A numpy transcription of XXH64 for inputs shorter than 32 bytes (its only code path for
    them): one vector operation per step instead of one Python call per slice.
    """
    if not 1 <= width < 32:
        raise ValueError(f"slice width must be in [1, 32), got {width}")
    count, at, read = _window_readers(data, starts, width)
    if count == 0:
        return np.zeros(0, dtype=np.uint64)
    p1, p2, p3, p4, p5 = (np.uint64(p) for p in (_P1, _P2, _P3, _P4, _P5))
    h = np.full(count, (seed + _P5 + width) & _MASK64, dtype=np.uint64)
    pos, spare = 0, np.empty_like(h)  # every step in place: no temporary arrays
    while width - pos >= 8:
        lane = read(pos, 8)
        lane *= p2
        lane = _rotl(lane, 31, spare)
        lane *= p1
        h ^= lane
        _rotl(h, 27, spare)
        h *= p1
        h += p4
        pos += 8
    if width - pos >= 4:
        lane = read(pos, 4)
        lane *= p1
        h ^= lane
        _rotl(h, 23, spare)
        h *= p2
        h += p3
        pos += 4
    while pos < width:
        np.multiply(at(pos), p5, out=spare)
        h ^= spare
        _rotl(h, 11, spare)
        h *= p1
        pos += 1
    for shift, prime in ((33, p2), (29, p3)):
        np.right_shift(h, np.uint64(shift), out=spare)
        h ^= spare
        h *= prime
    np.right_shift(h, np.uint64(32), out=spare)
    h ^= spare
    return h


def char_shingle_hashes(norm: str, ngram: int) -> np.ndarray:
    """xxh64 of the UTF-8 bytes of every character shingle (with repeats) of a non-empty text."""
    data = norm.encode("utf-8", errors="surrogatepass")
    if len(norm) <= ngram:
        return np.array([xxhash.xxh64_intdigest(data)], dtype=np.uint64)
    if len(data) == len(norm) and ngram < 32:
        return xxh64_slices(data, None, ngram)  # ASCII: shingles are the byte windows
    # Shingle i spans the bytes from character i's first byte to character i+ngram's first byte.
    lead = np.flatnonzero((np.frombuffer(data, dtype=np.uint8) & 0xC0) != 0x80)
    bounds = np.r_[lead, len(data)]
    starts, widths = bounds[: len(norm) - ngram + 1], bounds[ngram:] - bounds[: len(norm) - ngram + 1]
    hashes = np.empty(len(starts), dtype=np.uint64)
    for width in np.unique(widths).tolist():  # one vectorised pass per byte width (1 for ASCII)
        chosen = widths == width
        if width < 32:
            hashes[chosen] = xxh64_slices(data, starts[chosen], width)
        else:
            hashes[chosen] = [xxhash.xxh64_intdigest(data[i : i + width]) for i in starts[chosen].tolist()]
    return hashes


def shingle_hashes(text: str, ngram: int = 5, unit: str = "char") -> np.ndarray:
    """Sorted distinct 64-bit xxh64 hashes of the shingles of ``text`` (uint64)."""
    if unit == "char":
        if ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {ngram}")
        norm = normalize_for_shingles(text)
        if not norm:
            return EMPTY_HASHES
        hashes = char_shingle_hashes(norm, ngram)
    else:
        words = shingles(text, ngram, unit)
        if not words:
            return EMPTY_HASHES
        hashes = np.fromiter((xxhash.xxh64_intdigest(w.encode("utf-8", errors="surrogatepass")) for w in words),
                             dtype=np.uint64)
    # Repeats dropped after hashing (a 64-bit collision inside one document is negligible);
    # memory stays 8 bytes per shingle however long the document.
    return sorted_distinct(hashes)
