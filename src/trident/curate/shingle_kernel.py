"""Fuzzy dedup's inner loops in compiled code (numba): shingle hashing over UTF-8 bytes, MinHash
signatures, and exact Jaccard of candidate pairs.

Every function computes exactly what trident.curate.minhash defines (tests compare them):
- ``shingle_hashes_flat``: xxh64 (seed 0) of the UTF-8 bytes of every character or word shingle of
  each normalised text, with repeats, in text order. A character shingle is ``ngram`` code points
  (bytes from one UTF-8 lead byte to the ``ngram``-th next); a word shingle is ``ngram`` words with
  their single separating spaces; a non-empty text with at most ``ngram`` units is one shingle.
- ``minhash_signatures``: per hash function ``(a * x mod 2**64) >> 32``, minimum over a document.
- ``pair_jaccard``: |A & B| / |A | B| of the distinct hashes of two documents.
- ``band_keys``: MinHasher.band_keys (xxh3_64 of each band's rows, seeded with the band) for bands
  of 17-128 bytes (5-32 rows, the usual ones); other widths go to MinHasher's Python loop.
Imported only by the tasks that run these loops, so importing trident stays free of numba;
cache=True keeps the machine code on disk, so later processes load it instead of compiling.
"""
from __future__ import annotations

from typing import Sequence

import numba
import numpy as np


_P1, _P2, _P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_P4, _P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)
_LOW32 = np.uint64(0xFFFFFFFF)
_jit = numba.njit(cache=True, nogil=True)


@_jit
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@_jit
def _round(acc, lane):
    acc = acc + lane * _P2
    return _rotl(acc, 31) * _P1


@_jit
def _merge(acc, lane):
    acc = acc ^ _round(np.uint64(0), lane)
    return acc * _P1 + _P4


@_jit
def _xxh64(words, p, stop):
    """XXH64 (seed 0) of bytes p..stop-1 of a text whose ``words[k]`` holds bytes k..k+7
    little-endian (github.com/Cyan4973/xxHash, its reference algorithm)."""
    length = stop - p
    if length >= 32:
        v1, v2, v3, v4 = _P1 + _P2, _P2, np.uint64(0), np.uint64(0) - _P1
        while p + 32 <= stop:
            v1 = _round(v1, words[p])
            v2 = _round(v2, words[p + 8])
            v3 = _round(v3, words[p + 16])
            v4 = _round(v4, words[p + 24])
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)
    else:
        h = _P5
    h += np.uint64(length)
    while p + 8 <= stop:
        h ^= _round(np.uint64(0), words[p])
        h = _rotl(h, 27) * _P1 + _P4
        p += 8
    if p + 4 <= stop:
        h ^= (words[p] & _LOW32) * _P1
        h = _rotl(h, 23) * _P2 + _P3
        p += 4
    while p < stop:
        h ^= (words[p] & np.uint64(0xFF)) * _P5
        h = _rotl(h, 11) * _P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    return h ^ (h >> np.uint64(32))


def xxh64_bytes(data: bytes) -> int:
    """xxh64 (seed 0) of ``data`` through the compiled code (for tests against the xxhash library)."""
    return int(_xxh64(_byte_words(np.frombuffer(data, dtype=np.uint8), 0, len(data)), 0, len(data)))


@_jit
def _byte_words(buf, start, stop):
    """words[k] = bytes start+k .. start+k+7 of ``buf`` little-endian (zeros past ``stop``)."""
    words = np.zeros(stop - start + 1, dtype=np.uint64)
    for k in range(stop - start - 1, -1, -1):
        words[k] = (words[k + 1] << np.uint64(8)) | np.uint64(buf[start + k])
    return words


@_jit
def _is_space(buf, p, stop, wide_spaces):
    """(whether the non-ASCII code point at byte p is str.isspace() whitespace, its UTF-8 width)."""
    lead = buf[p]
    width = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    if not (lead == 0xC2 or lead == 0xE1 or lead == 0xE2 or lead == 0xE3) or p + width > stop:
        return False, width  # only these lead bytes begin a wide space
    code = np.int64(lead & (0x3F >> (width - 1)))
    for k in range(1, width):
        code = (code << 6) | (buf[p + k] & 0x3F)
    for space in wide_spaces:
        if code == space:
            return True, width
    return False, width


@_jit
def _normalise_kernel(raw, bounds, ascii_space, wide_spaces):
    """normalize_for_shingles of UTF-8 texts lower-cased but for ASCII A-Z (done here):
    whitespace runs -> one space, stripped."""
    out = np.empty(len(raw), dtype=np.uint8)
    new_bounds = np.zeros_like(bounds)
    n = 0
    for i in range(len(bounds) - 1):
        p, stop, pending, wrote = bounds[i], bounds[i + 1], False, False
        while p < stop:
            lead = raw[p]
            if lead < 0x80:  # the common case inline: one byte, one table look-up
                space, width = ascii_space[lead], 1
            else:
                space, width = _is_space(raw, p, stop, wide_spaces)
            if space:
                pending = wrote  # leading whitespace is dropped, trailing never written
                p += width
                continue
            if pending:
                out[n] = 32
                n += 1
                pending = False
            if lead < 0x80:
                out[n] = lead + 32 if 65 <= lead <= 90 else lead
                n += 1
                p += 1
            else:
                width = min(width, stop - p)
                out[n : n + width] = raw[p : p + width]
                n += width
                p += width
            wrote = True
        new_bounds[i + 1] = n
    return out[:n], new_bounds


@_jit
def _unit_starts(buf, start, stop, word):
    """Offsets (from ``start``) where each unit (code point, or word after a space) begins, then
    where the last one's shingle ends."""
    out = np.empty(stop - start + 1, dtype=np.int64)
    n = 0
    for p in range(start, stop):
        if word:
            if p == start or buf[p - 1] == 32:
                out[n] = p - start
                n += 1
        elif (buf[p] & 0xC0) != 0x80:
            out[n] = p - start
            n += 1
    out[n] = stop - start + 1 if word else stop - start  # a word shingle ends before the next space
    return out[: n + 1]


@_jit
def _shingle_kernel(buf, bounds, ngram, word):
    """(flat hashes, offsets) of the texts ``buf[bounds[i]:bounds[i+1]]`` (already normalised)."""
    n = len(bounds) - 1
    counts = np.zeros(n + 1, dtype=np.int64)
    flat = np.empty(len(buf) + n, dtype=np.uint64)  # at most one shingle per byte, or one per text
    filled = 0
    shift = 1 if word else 0  # a word shingle's bytes stop before the space that follows it
    for i in range(n):
        start, stop = bounds[i], bounds[i + 1]
        if stop == start:
            continue
        words = _byte_words(buf, start, stop)
        starts = _unit_starts(buf, start, stop, word)
        units = len(starts) - 1
        if units <= ngram:
            flat[filled] = _xxh64(words, 0, stop - start)
            filled += 1
            counts[i + 1] = 1
            continue
        for k in range(units - ngram + 1):
            flat[filled] = _xxh64(words, starts[k], starts[k + ngram] - shift)
            filled += 1
        counts[i + 1] = units - ngram + 1
    return flat[:filled], np.cumsum(counts)


_ASCII_SPACE = np.array([chr(b).isspace() for b in range(128)])
_WIDE_SPACES = np.array([c for c in range(128, 0x3001) if chr(c).isspace()], dtype=np.int64)


def normalised_bytes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, bounds): ``normalize_for_shingles(texts[i])`` encoded is ``buf[bounds[i]:bounds[i+1]]``."""
    # str.lower keeps Python's Unicode rules for the others; ASCII is lower-cased by the compiled pass.
    data = [t.encode() if t.isascii() else t.lower().encode("utf-8", errors="surrogatepass") for t in texts]
    bounds = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in data], out=bounds[1:])
    return _normalise_kernel(np.frombuffer(b"".join(data), dtype=np.uint8), bounds, _ASCII_SPACE, _WIDE_SPACES)


def shingle_hashes_flat(texts: Sequence[str], ngram: int = 5, unit: str = "char") -> tuple[np.ndarray, np.ndarray]:
    """(flat uint64 hashes, offsets int64 of length n+1): text i's shingle hashes, with repeats, are
    ``flat[offsets[i]:offsets[i+1]]``; as a set they equal ``minhash.shingle_hashes(texts[i], ngram, unit)``."""
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    if unit not in ("char", "word"):
        raise ValueError(f"shingle unit must be 'char' or 'word', got {unit!r}")
    buf, bounds = normalised_bytes(texts)
    return _shingle_kernel(buf, bounds, ngram, unit == "word")


@_jit
def _signature_kernel(flat, offsets, a):
    """(n, len(a)) uint32: per document, per function, min over its hashes of (a*x mod 2**64) >> 32."""
    n, m = len(offsets) - 1, len(a)
    sig = np.empty((n, m), dtype=np.uint32)
    for i in range(n):
        hashes = flat[offsets[i] : offsets[i + 1]]  # a document's hashes stay in L1 across the m passes
        for j in range(m):
            # One function over all hashes: a min-reduction the compiler vectorises (4 lanes of u64).
            multiplier, best = a[j], np.uint64(0xFFFFFFFFFFFFFFFF)
            for s in range(len(hashes)):
                best = min(best, multiplier * hashes[s])
            sig[i, j] = np.uint32(best >> np.uint64(32))  # the shift is monotonic: min commutes with it
    return sig


def minhash_signatures(flat: np.ndarray, offsets: np.ndarray, multipliers: np.ndarray) -> np.ndarray:
    """MinHasher.signatures_from_flat, compiled: an empty document gets all-0xFFFFFFFF."""
    return _signature_kernel(np.ascontiguousarray(flat, dtype=np.uint64),
                             np.ascontiguousarray(offsets, dtype=np.int64),
                             np.ascontiguousarray(multipliers, dtype=np.uint64))


@_jit
def distinct_sorted(flat, offsets):
    """Each document's hashes sorted with repeats removed: (flat, offsets) again."""
    out = np.empty_like(flat)
    new_offsets = np.zeros(len(offsets), dtype=np.int64)
    filled = 0
    for i in range(len(offsets) - 1):
        part = np.sort(flat[offsets[i] : offsets[i + 1]])
        for k in range(len(part)):
            if k == 0 or part[k] != part[k - 1]:
                out[filled] = part[k]
                filled += 1
        new_offsets[i + 1] = filled
    return out[:filled], new_offsets


@_jit
def pair_jaccard(flat, offsets, first, second):
    """Jaccard of documents first[k] and second[k] (indices into ``offsets``) of sorted distinct
    hashes, by one merge per pair; 0.0 when both are empty."""
    out = np.zeros(len(first), dtype=np.float64)
    for k in range(len(first)):
        i, i_end = offsets[first[k]], offsets[first[k] + 1]
        j, j_end = offsets[second[k]], offsets[second[k] + 1]
        size = (i_end - i) + (j_end - j)
        shared = 0
        while i < i_end and j < j_end:
            if flat[i] == flat[j]:
                shared += 1
                i += 1
                j += 1
            elif flat[i] < flat[j]:
                i += 1
            else:
                j += 1
        if size:
            out[k] = shared / (size - shared)
    return out


# XXH3's default secret (its first 128 bytes: all that inputs of 17-128 bytes use), as uint64 words.
_XXH3_SECRET = np.frombuffer(bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"), dtype="<u8").copy()
_PRIME_MX1 = np.uint64(0x165667919E3779F9)


@_jit
def _fold_mul128(a, b):
    """Low 64 bits XOR high 64 bits of the 128-bit product a*b."""
    a_lo, a_hi, b_lo, b_hi = a & _LOW32, a >> np.uint64(32), b & _LOW32, b >> np.uint64(32)
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    cross = (ll >> np.uint64(32)) + (lh & _LOW32) + hl
    high = hh + (lh >> np.uint64(32)) + (cross >> np.uint64(32))
    low = (cross << np.uint64(32)) | (ll & _LOW32)
    return low ^ high


@_jit
def _mix16(row, at, secret, word, seed):
    """XXH3_mix16B of the 16 bytes at byte ``at`` of ``row`` (uint32 words), secret words ``word``.."""
    k = at // 4
    lo = np.uint64(row[k]) | (np.uint64(row[k + 1]) << np.uint64(32))
    hi = np.uint64(row[k + 2]) | (np.uint64(row[k + 3]) << np.uint64(32))
    return _fold_mul128(lo ^ (secret[word] + seed), hi ^ (secret[word + 1] - seed))


@_jit
def _band_key_kernel(sig, bands, secret):
    n, rows = sig.shape[0], sig.shape[1] // bands
    size = 4 * rows
    keys = np.empty((n, bands), dtype=np.uint64)
    for i in range(n):
        for j in range(bands):
            row, seed = sig[i, j * rows : (j + 1) * rows], np.uint64(j)
            acc = np.uint64(size) * _P1
            for step in range(3, -1, -1):  # XXH3_len_17to128_64b: pairs from both ends, widest first
                if size > 32 * step:
                    acc += _mix16(row, 16 * step, secret, 4 * step, seed)
                    acc += _mix16(row, size - 16 * (step + 1), secret, 4 * step + 2, seed)
            acc ^= acc >> np.uint64(37)
            acc *= _PRIME_MX1
            keys[i, j] = acc ^ (acc >> np.uint64(32))
    return keys


def band_keys(hasher, signatures: np.ndarray) -> np.ndarray:
    """``hasher.band_keys(signatures)`` (a MinHasher), compiled for bands of 17-128 bytes."""
    if not 17 <= 4 * hasher.rows <= 128:
        return hasher.band_keys(signatures)
    sig = np.ascontiguousarray(signatures, dtype=np.uint32)
    if sig.ndim != 2 or sig.shape[1] != hasher.num_hashes:
        raise ValueError(f"signatures must have shape (n, {hasher.num_hashes}), got {sig.shape}")
    return _band_key_kernel(sig, hasher.bands, _XXH3_SECRET)
