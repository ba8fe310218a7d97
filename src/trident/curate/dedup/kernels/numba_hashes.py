"""The hash functions of fuzzy dedup's loops as numba functions: XXH64 (seed 0) of a byte range, for
shingles, and XXH3_64 of 17-128 bytes, for LSH band keys (github.com/Cyan4973/xxHash; the tests
compare both with the xxhash library). Imported by trident.curate.dedup.kernels.numba_loops, whose
exports the ahead-of-time build compiles with them.
"""
from __future__ import annotations

import numba
import numpy as np

_P1, _P2, _P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_P4, _P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)
_LOW32 = np.uint64(0xFFFFFFFF)
_jit = numba.njit(cache=True, nogil=True)
# Helpers are inlined into the loops that call them (numba's own inlining): a call per shingle
# through numba's calling convention cost a quarter of the hashing time.
_inline = numba.njit(cache=True, nogil=True, inline="always")


@_inline
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@_inline
def _round(acc, lane):
    acc = acc + lane * _P2
    return _rotl(acc, 31) * _P1


@_inline
def _merge(acc, lane):
    acc = acc ^ _round(np.uint64(0), lane)
    return acc * _P1 + _P4


@_inline
def _le64(buf, p):
    """Bytes p..p+7 as a little-endian uint64 (unsigned indices: the compiler merges the 8 loads)."""
    q = np.uint64(p)
    return (np.uint64(buf[q]) | (np.uint64(buf[q + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(buf[q + np.uint64(2)]) << np.uint64(16)) | (np.uint64(buf[q + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(buf[q + np.uint64(4)]) << np.uint64(32)) | (np.uint64(buf[q + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(buf[q + np.uint64(6)]) << np.uint64(48)) | (np.uint64(buf[q + np.uint64(7)]) << np.uint64(56)))


@_inline
def _le32(buf, p):
    q = np.uint64(p)
    return (np.uint64(buf[q]) | (np.uint64(buf[q + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(buf[q + np.uint64(2)]) << np.uint64(16)) | (np.uint64(buf[q + np.uint64(3)]) << np.uint64(24)))


@_inline
def _lane8(h, buf, p):
    h ^= _round(np.uint64(0), _le64(buf, p))
    return _rotl(h, 27) * _P1 + _P4


@_inline
def _tail(h, buf, p, rest):
    """XXH64's last 0-31 bytes into ``h``, then its avalanche (loops the compiler unrolls per length)."""
    while rest >= 8:
        h = _lane8(h, buf, p)
        p += 8
        rest -= 8
    if rest >= 4:
        h ^= _le32(buf, p) * _P1
        h = _rotl(h, 23) * _P2 + _P3
        p += 4
        rest -= 4
    while rest > 0:
        h ^= np.uint64(buf[np.uint64(p)]) * _P5
        h = _rotl(h, 11) * _P1
        p += 1
        rest -= 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    return h ^ (h >> np.uint64(32))


@_inline
def _xxh64(buf, p, stop):
    """XXH64 (seed 0; github.com/Cyan4973/xxHash) of bytes p..stop-1 of ``buf``, reading no other."""
    length = stop - p
    if length < 32:
        return _tail(_P5 + np.uint64(length), buf, p, length)
    v1, v2, v3, v4 = _P1 + _P2, _P2, np.uint64(0), np.uint64(0) - _P1
    while p + 32 <= stop:
        v1 = _round(v1, _le64(buf, p))
        v2 = _round(v2, _le64(buf, p + 8))
        v3 = _round(v3, _le64(buf, p + 16))
        v4 = _round(v4, _le64(buf, p + 24))
        p += 32
    h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
    h = _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)
    return _tail(h + np.uint64(length), buf, p, stop - p)


@_jit
def xxh64_of(buf):
    """XXH64 (seed 0) of a whole uint8 array (the tests compare it with the xxhash library)."""
    return _xxh64(buf, 0, len(buf))


_PRIME_MX1 = np.uint64(0x165667919E3779F9)


@_inline
def _fold_mul128(a, b):
    """Low 64 bits XOR high 64 bits of the 128-bit product a*b."""
    a_lo, a_hi, b_lo, b_hi = a & _LOW32, a >> np.uint64(32), b & _LOW32, b >> np.uint64(32)
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    cross = (ll >> np.uint64(32)) + (lh & _LOW32) + hl
    high = hh + (lh >> np.uint64(32)) + (cross >> np.uint64(32))
    low = (cross << np.uint64(32)) | (ll & _LOW32)
    return low ^ high


@_inline
def _mix16(row, at, secret, word, seed):
    """XXH3_mix16B of the 16 bytes at byte ``at`` of ``row`` (uint32 words), secret words ``word``.."""
    k = at // 4
    lo = np.uint64(row[k]) | (np.uint64(row[k + 1]) << np.uint64(32))
    hi = np.uint64(row[k + 2]) | (np.uint64(row[k + 3]) << np.uint64(32))
    return _fold_mul128(lo ^ (secret[word] + seed), hi ^ (secret[word + 1] - seed))


@_jit
def band_key_kernel(sig, bands, secret):
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
