"""Fuzzy dedup's inner loops as numba functions: shingle hashing over UTF-8 bytes, MinHash
signatures, exact Jaccard of candidate pairs, LSH band keys. trident.curate.dedup.kernels.loops is the
module to call: it states what each loop computes and runs it from the ahead-of-time extension
trident.curate.dedup.kernels.build makes of these functions (no numba import at run time) or, where none
can be built, through numba's JIT (cache=True). Importing this module imports numba.
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


@_inline
def _code_point(buf, p, width):
    """The code point of the UTF-8 sequence of ``width`` bytes at byte p."""
    code = np.int64(buf[p] & (0x7F >> width))
    for k in range(1, width):
        code = (code << 6) | (buf[p + k] & 0x3F)
    return code


@_inline
def _is_space(buf, p, stop, wide_spaces):
    """(whether the non-ASCII code point at byte p is str.isspace() whitespace, its UTF-8 width)."""
    lead = buf[p]
    width = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    if not (lead == 0xC2 or lead == 0xE1 or lead == 0xE2 or lead == 0xE3) or p + width > stop:
        return False, width  # only these lead bytes begin a wide space
    code = _code_point(buf, p, width)
    for space in wide_spaces:
        if code == space:
            return True, width
    return False, width


@_inline
def _put_utf8(out, n, code):
    """Write the code point (below 0x10000) as UTF-8 at out[n]; returns the position after it."""
    if code < 0x80:
        out[n] = code
        return n + 1
    if code < 0x800:
        out[n], out[n + 1] = 0xC0 | (code >> 6), 0x80 | (code & 0x3F)
        return n + 2
    out[n], out[n + 1], out[n + 2] = 0xE0 | (code >> 12), 0x80 | ((code >> 6) & 0x3F), 0x80 | (code & 0x3F)
    return n + 3


@_jit
def normalise_kernel(raw, bounds, ascii_space, wide_spaces, lower):
    """normalize_for_shingles of UTF-8 texts: lower-cased (non-ASCII by ``lower``: str.lower of each
    character of the Basic Multilingual Plane), whitespace runs -> one space, stripped. A text with a
    character ``lower`` lacks (-1, or past U+FFFF) is flagged, for str.lower and an empty table."""
    out = np.empty(len(raw) + len(raw) // 2 + 3, dtype=np.uint8)  # a 2-byte letter's lower case may take 3
    new_bounds = np.zeros_like(bounds)
    flagged = np.zeros(len(bounds) - 1, dtype=np.bool_)
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
                code = _code_point(raw, p, width) if len(lower) and width < 4 else -1
                if code >= 0 and lower[code] >= 0:
                    n = _put_utf8(out, n, lower[code])
                else:
                    flagged[i] |= len(lower) > 0
                    out[n : n + width] = raw[p : p + width]
                    n += width
                p += width
            wrote = True
        new_bounds[i + 1] = n
    return out[:n], new_bounds, flagged


@_inline
def _unit_starts(buf, start, stop, word, out):
    """Fill ``out`` with the offsets where each unit (code point, or word after a space) of
    buf[start:stop] begins, then the end of the last one's shingle; returns the number of units."""
    n = 0
    for p in range(start, stop):
        if word:
            if p == start or buf[p - 1] == 32:
                out[n] = p
                n += 1
        elif (buf[p] & 0xC0) != 0x80:
            out[n] = p
            n += 1
    out[n] = stop + 1 if word else stop  # a word shingle ends before the next space
    return n


_HASHED_TAG = np.uint64(0xFF) << np.uint64(56)
_FNV_BASIS, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_MIX1, _MIX2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)


@_inline
def _packed(buf, p, stop):
    """A key for the shingle of bytes p..stop-1 that equal shingles share and distinct ones do not:
    up to 7 bytes are the key itself (little-endian, the length in the top byte); a longer shingle's
    key is 56 bits of a hash of it (FNV-1a, then murmur3's finaliser), tagged 0xFF. Not xxh64 there:
    its inlined body in this branch made the whole loop as slow as hashing every shingle."""
    length = stop - p
    if length <= 7:
        key = np.uint64(length) << np.uint64(56)
        if p + 8 <= len(buf):  # one 8-byte load, the bytes past the shingle masked off
            return key | (_le64(buf, p) & ((np.uint64(1) << np.uint64(8 * length)) - np.uint64(1)))
        for q in range(length):
            key |= np.uint64(buf[p + q]) << np.uint64(8 * q)
        return key
    h = _FNV_BASIS
    for q in range(p, stop):
        h = (h ^ np.uint64(buf[q])) * _FNV_PRIME
    h = (h ^ (h >> np.uint64(33))) * _MIX1
    h = (h ^ (h >> np.uint64(33))) * _MIX2
    return _HASHED_TAG | ((h ^ (h >> np.uint64(33))) >> np.uint64(8))


@_jit
def shingle_kernel(buf, bounds, ngram, word, packed):
    """(flat hashes, offsets) of the texts ``buf[bounds[i]:bounds[i+1]]`` (already normalised);
    ``packed``: shingle keys (``_packed``) instead of xxh64 hashes."""
    n = len(bounds) - 1
    counts = np.zeros(n + 1, dtype=np.int64)
    flat = np.empty(len(buf) + n, dtype=np.uint64)  # at most one shingle per byte, or one per text
    longest = 0
    for i in range(n):
        longest = max(longest, bounds[i + 1] - bounds[i])
    starts = np.empty(longest + 1, dtype=np.int64)  # one text's unit starts at a time
    filled = 0
    shift = 1 if word else 0  # a word shingle's bytes stop before the space that follows it
    for i in range(n):
        start, stop = bounds[i], bounds[i + 1]
        if stop == start:
            continue
        units = _unit_starts(buf, start, stop, word, starts)
        if units <= ngram:  # a text of at most ngram units is one shingle: all of its bytes
            flat[filled] = _packed(buf, start, stop) if packed else _xxh64(buf, start, stop)
            filled += 1
            counts[i + 1] = 1
            continue
        count = units - ngram + 1
        if packed:  # two loops: with both calls in one, the keys took as long as the hashes
            for k in range(count):
                flat[filled + k] = _packed(buf, starts[k], starts[k + ngram] - shift)
        else:
            for k in range(count):
                flat[filled + k] = _xxh64(buf, starts[k], starts[k + ngram] - shift)
        filled += count
        counts[i + 1] = count
    return flat[:filled], np.cumsum(counts)


@_jit
def signature_kernel(flat, offsets, a):
    """(n, len(a)) uint32: per document, per function, min over its hashes x of (a*x mod 2**64) >> 32.

    Computed on 32-bit halves (x = xh*2**32 + xl, a likewise): the top half of a*x mod 2**64 is
    (hi32(al*xl) + al*xh + ah*xl) mod 2**32, and taking the top half commutes with the minimum, so
    the minimum is taken over those: 8 lanes of uint32 per AVX2 instruction instead of 4 of uint64."""
    n, m = len(offsets) - 1, len(a)
    sig = np.full((n, m), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    block = 16384  # hashes a pass: their halves (128 KB) stay in cache across the m passes (long documents: -15 %)
    low, high = np.empty(block, dtype=np.uint32), np.empty(block, dtype=np.uint32)
    for i in range(n):
        for start in range(offsets[i], offsets[i + 1], block):
            size = min(block, offsets[i + 1] - start)
            for s in range(size):
                low[s], high[s] = np.uint32(flat[start + s] & _LOW32), np.uint32(flat[start + s] >> np.uint64(32))
            for j in range(m):
                a_low, a_high = np.uint32(a[j] & _LOW32), np.uint32(a[j] >> np.uint64(32))
                wide, best = np.uint64(a_low), sig[i, j]
                for s in range(size):  # a min-reduction the compiler vectorises
                    carry = np.uint32((wide * np.uint64(low[s])) >> np.uint64(32))
                    best = min(best, np.uint32(carry + np.uint32(a_low * high[s]) + np.uint32(a_high * low[s])))
                sig[i, j] = best
    return sig


@_inline
def _mark(keys, flags, mask, value, flag):
    """Set ``flag`` on ``value`` in the table (added if absent; a slot with flags 0 is empty); its flags before."""
    slot = np.int64((value * _P1) >> np.uint64(32)) & np.int64(mask)  # packed keys' low bits are text
    while flags[slot] != 0:
        if keys[slot] == value:
            before = flags[slot]
            flags[slot] = before | flag
            return before
        slot = (slot + 1) & np.int64(mask)
    keys[slot], flags[slot] = value, flag
    return np.uint8(0)


@_jit
def pair_jaccard(flat, offsets, first, second, at_least):
    """Jaccard of the hash sets of documents first[k] and second[k] (``flat[offsets[i]:offsets[i+1]]``,
    repeats immaterial; 0.0 when both are empty), through a table sized to the pair: the smaller one's
    hashes marked 1, the other's 2, |A|, |B|, |A & B| counted as marks first appear. A pair that cannot
    reach ``at_least`` (as float32) stops early and gets that bound, below it (at_least 0: all exact)."""
    longest = 1
    for i in range(len(offsets) - 1):
        longest = max(longest, offsets[i + 1] - offsets[i])
    capacity = 1
    while capacity < 4 * longest:
        capacity *= 2
    keys, flags = np.empty(capacity, dtype=np.uint64), np.zeros(capacity, dtype=np.uint8)
    out = np.zeros(len(first), dtype=np.float64)
    floor = np.float32(at_least)
    for k in range(len(first)):
        a, b = first[k], second[k]
        if offsets[a + 1] - offsets[a] > offsets[b + 1] - offsets[b]:
            a, b = b, a  # the smaller one in the table first: a pair far apart in size stops sooner
        a_start, a_stop, b_start, b_stop = offsets[a], offsets[a + 1], offsets[b], offsets[b + 1]
        size = 1
        while size < 2 * ((a_stop - a_start) + (b_stop - b_start)):
            size *= 2
        # Emptied by clearing its flags: a stamp a slot was one more random access a probe (30-50 %).
        flags[:size] = 0
        mask = np.uint64(size - 1)
        in_a = in_b = shared = 0
        for s in range(a_start, a_stop):
            if _mark(keys, flags, mask, flat[s], np.uint8(1)) == 0:
                in_a += 1
        stopped = False
        for s in range(b_start, b_stop):
            before = _mark(keys, flags, mask, flat[s], np.uint8(2))
            if (before & 2) == 0:
                in_b += 1
                shared += before & 1
                if (before & 1) == 0:  # the union grew: can the rest of B still reach at_least?
                    most = min(shared + b_stop - s - 1, in_a)  # each later hash one more shared at best
                    union = in_a + in_b - shared
                    # the product first (cheap); the float32 quotient decides, as the caller compares
                    if most < at_least * union and np.float32(most / union) < floor:
                        out[k], stopped = most / union, True
                        break
        if not stopped and in_a + in_b:
            out[k] = shared / (in_a + in_b - shared)
    return out


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
