"""Fuzzy dedup's inner loops as numba functions: shingle hashing over UTF-8 bytes, MinHash
signatures, exact Jaccard of candidate pairs, LSH band keys (the hash functions themselves:
trident.curate.dedup.kernels.numba_hashes). trident.curate.dedup.kernels.loops is the
module to call: it states what each loop computes and runs it from the ahead-of-time extension
trident.curate.dedup.kernels.build makes of these functions (no numba import at run time) or, where none
can be built, through numba's JIT (cache=True). Importing this module imports numba.
"""
from __future__ import annotations

import numpy as np

from trident.curate.dedup.kernels.numba_hashes import (_LOW32, _P1, _inline, _jit, _le64, _xxh64,
                                                       band_key_kernel, xxh64_of)


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


@_inline
def _top_half(a_low, a_high, wide, xl, xh):
    """(a*x mod 2**64) >> 32 from 32-bit halves (x = xh*2**32 + xl, a likewise; wide = a_low as uint64):
    (hi32(al*xl) + al*xh + ah*xl) mod 2**32, 8 lanes of uint32 per AVX2 instruction instead of 4."""
    carry = np.uint32((wide * np.uint64(xl)) >> np.uint64(32))
    return np.uint32(carry + np.uint32(a_low * xh) + np.uint32(a_high * xl))


@_inline
def _min_passes(sig, i, a, low, high, size):
    """sig[i, j] lowered to the minimum over the ``size`` hashes x (32-bit halves ``low``, ``high``) of
    (a[j]*x mod 2**64) >> 32, for every j (taking the top half commutes with the minimum). Two
    functions a pass: each hash's halves are loaded and widened once for both (~12 % faster)."""
    m = len(a)
    for j in range(0, m - m % 2, 2):
        low0, high0, low1, high1 = (np.uint32(a[j] & _LOW32), np.uint32(a[j] >> np.uint64(32)),
                                    np.uint32(a[j + 1] & _LOW32), np.uint32(a[j + 1] >> np.uint64(32)))
        wide0, wide1, best0, best1 = np.uint64(low0), np.uint64(low1), sig[i, j], sig[i, j + 1]
        for s in range(size):  # min-reductions the compiler vectorises
            best0 = min(best0, _top_half(low0, high0, wide0, low[s], high[s]))
            best1 = min(best1, _top_half(low1, high1, wide1, low[s], high[s]))
        sig[i, j], sig[i, j + 1] = best0, best1
    if m % 2:
        a_low, a_high = np.uint32(a[m - 1] & _LOW32), np.uint32(a[m - 1] >> np.uint64(32))
        wide, best = np.uint64(a_low), sig[i, m - 1]
        for s in range(size):
            best = min(best, _top_half(a_low, a_high, wide, low[s], high[s]))
        sig[i, m - 1] = best


_BLOCK = 16384  # hashes a pass: their halves (128 KB) stay in cache across the passes (long documents: -15 %)


@_jit
def signature_kernel(flat, offsets, a):
    """(n, len(a)) uint32: per document, per function, min over its hashes x of (a*x mod 2**64) >> 32."""
    n = len(offsets) - 1
    sig = np.full((n, len(a)), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    low, high = np.empty(_BLOCK, dtype=np.uint32), np.empty(_BLOCK, dtype=np.uint32)
    for i in range(n):
        for start in range(offsets[i], offsets[i + 1], _BLOCK):
            size = min(_BLOCK, offsets[i + 1] - start)
            for s in range(size):
                low[s], high[s] = np.uint32(flat[start + s] & _LOW32), np.uint32(flat[start + s] >> np.uint64(32))
            _min_passes(sig, i, a, low, high, size)
    return sig


@_jit
def shingle_signature_kernel(buf, bounds, ngram, word, a):
    """signature_kernel of shingle_kernel's hashes (xxh64, not packed) without the array of every hash:
    a text's hashes are made a block at a time into the 32-bit halves the passes read (that array,
    8 bytes a text byte, was written, page-faulted in and read again: as long as the hashing)."""
    n = len(bounds) - 1
    sig = np.full((n, len(a)), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    low, high = np.empty(_BLOCK, dtype=np.uint32), np.empty(_BLOCK, dtype=np.uint32)
    longest = 0
    for i in range(n):
        longest = max(longest, bounds[i + 1] - bounds[i])
    starts = np.empty(longest + 1, dtype=np.int64)
    shift = 1 if word else 0
    for i in range(n):
        start, stop = bounds[i], bounds[i + 1]
        if stop == start:
            continue
        units = _unit_starts(buf, start, stop, word, starts)
        if units <= ngram:  # one shingle: all of its bytes
            h = _xxh64(buf, start, stop)
            low[0], high[0] = np.uint32(h & _LOW32), np.uint32(h >> np.uint64(32))
            _min_passes(sig, i, a, low, high, 1)
            continue
        count = units - ngram + 1
        for first in range(0, count, _BLOCK):
            size = min(_BLOCK, count - first)
            for s in range(size):
                h = _xxh64(buf, starts[first + s], starts[first + s + ngram] - shift)
                low[s], high[s] = np.uint32(h & _LOW32), np.uint32(h >> np.uint64(32))
            _min_passes(sig, i, a, low, high, size)
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
