"""Shingle hashes of many texts at once: the same hashes as ``shingles.shingle_hashes``, batched.

Per document, ``shingle_hashes`` costs a dozen numpy calls on a few kilobytes, so for web-length
documents the call overhead is as large as the work. Here the ASCII texts of a batch are
normalised together in numpy (a lookup table lower-cases and turns Python's ASCII whitespace into
spaces; runs collapse to one space; each document is stripped) and every byte window is hashed in
one pass; windows that cross a document boundary are discarded. Other texts (non-ASCII, word
shingles) go through ``shingle_hashes``'s per-document path. The promise, tested: document i's
hashes, as a set, equal ``shingle_hashes(texts[i], ngram, unit)``; they come in text order, with
repeats, which a MinHash minimum does not see.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from trident.curate.dedup.shingles import char_shingle_hashes, normalize_for_shingles, shingle_hashes, xxh64_slices

# Byte -> the byte str.lower() gives for ASCII, every str.isspace() ASCII character a space (32).
# 0xFF never occurs in ASCII text: it separates the texts of a batch.
_TABLE = bytes(32 if chr(b).isspace() else ord(chr(b).lower()) if b < 128 else b for b in range(256))
_SPACE, _SEPARATOR = 32, 0xFF
_HASH_BYTES = 1 << 16  # bytes hashed per xxh64_slices call: its uint64 temporaries stay in cache


def _normalised_ascii(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, starts): ``normalize_for_shingles`` of every ASCII text, between 0xFF separators;
    text k's bytes begin at ``starts[k]`` and end at ``starts[k + 1] - 1``."""
    sep = bytes([_SEPARATOR])
    data = np.frombuffer((sep + sep.join(texts) + sep).translate(_TABLE), dtype=np.uint8)
    space = data == _SPACE
    keep = ~space
    keep[1:] |= ~space[:-1]  # a space survives only after a non-space: runs collapse to one
    data = data[keep]
    space = data == _SPACE
    edge = data == _SEPARATOR
    # Spaces are single now; one next to a separator is a leading or trailing one: stripped.
    strip = space[1:-1] & (edge[:-2] | edge[2:])
    data = data[np.r_[True, ~strip, True]]
    return data, np.flatnonzero(data == _SEPARATOR) + 1


def _ascii_hashes(texts: list[bytes], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes of every full ``ngram`` window of each text in order, normalised length per text)."""
    norm, starts = _normalised_ascii(texts)
    lengths = np.diff(starts) - 1
    windows = len(norm) - ngram + 1
    if windows <= 0:
        return np.zeros(0, dtype=np.uint64), lengths
    full = np.maximum(lengths - ngram + 1, 0)
    # Per text: its full windows, then those running into the separator (and the separator's).
    inside = np.repeat(np.tile([True, False], len(texts)), np.stack([full, lengths + 1 - full], axis=1).ravel())
    inside = np.r_[False, inside][:windows]
    data = memoryview(norm)
    out = np.empty(int(full.sum()), dtype=np.uint64)
    filled = 0
    for start in range(0, windows, _HASH_BYTES):
        stop = min(windows, start + _HASH_BYTES)
        kept = xxh64_slices(data[start : stop + ngram - 1], None, ngram)[inside[start:stop]]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out, lengths


def shingle_hash_batch(texts: Sequence[str], ngram: int = 5, unit: str = "char") -> tuple[np.ndarray, np.ndarray]:
    """(flat uint64 hashes, offsets int64 of length n+1): text i's shingle hashes are
    ``flat[offsets[i]:offsets[i+1]]``, the set ``shingle_hashes(texts[i], ngram, unit)`` with repeats."""
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    per_text: list[np.ndarray] = [None] * len(texts)  # type: ignore[list-item]
    ascii_rows, ascii_bytes = [], []
    for i, text in enumerate(texts):
        data = text.encode("utf-8", errors="surrogatepass")
        if unit == "char" and len(data) == len(text) and ngram < 32:
            ascii_rows.append(i)
            ascii_bytes.append(data)
        else:
            per_text[i] = shingle_hashes(text, ngram, unit)
    if ascii_rows:
        hashes, lengths = _ascii_hashes(ascii_bytes, ngram)
        ends = np.r_[0, np.cumsum(np.maximum(lengths - ngram + 1, 0))]
        short = (lengths > 0) & (lengths < ngram)
        if len(ascii_rows) == len(texts) and not short.any():
            return hashes, ends.astype(np.int64)  # every text took the batched path: no copy
        for k, row in enumerate(ascii_rows):
            if short[k]:  # a text shorter than a shingle is one shingle
                per_text[row] = char_shingle_hashes(normalize_for_shingles(texts[row]), ngram)
            else:
                per_text[row] = hashes[ends[k] : ends[k + 1]]
    counts = np.fromiter((h.size for h in per_text), dtype=np.int64, count=len(texts))
    offsets = np.r_[0, np.cumsum(counts)].astype(np.int64)
    flat = np.concatenate(per_text) if per_text else np.zeros(0, dtype=np.uint64)
    return flat.astype(np.uint64, copy=False), offsets
