"""Fuzzy dedup's inner loops in compiled code: shingle hashing over UTF-8 bytes, MinHash signatures,
exact Jaccard of candidate pairs, LSH band keys.

Every function computes exactly what trident.curate.dedup.minhash defines (tests compare them):
- ``shingle_hashes_flat``: xxh64 (seed 0) of the UTF-8 bytes of every character or word shingle of
  each normalised text, with repeats, in text order. A character shingle is ``ngram`` code points
  (bytes from one UTF-8 lead byte to the ``ngram``-th next); a word shingle is ``ngram`` words with
  their single separating spaces; a non-empty text with at most ``ngram`` units is one shingle.
- ``hashes_of_normalised(..., packed=True)``: shingle keys in place of the hashes, equal for equal
  shingles and distinct for distinct ones (a shingle of at most 7 UTF-8 bytes is its bytes and
  length; a longer one 56 bits of a hash of it, tagged apart): the same sets, cheaper to make;
  verification's Jaccard uses them, MinHash keeps the xxh64 hashes.
- ``minhash_signatures``: per hash function ``(a * x mod 2**64) >> 32``, minimum over a document;
  ``shingle_signatures`` the same of the xxh64 shingle hashes of normalised texts, made as it goes.
- ``pair_jaccard``: |A & B| / |A | B| of the distinct hashes of two documents (or, given a floor,
  a bound below it for a pair that cannot reach it: such pairs stop early).
- ``band_keys``: MinHasher.band_keys (xxh3_64 of each band's rows, seeded with the band) for bands
  of 17-128 bytes (5-32 rows, the usual ones); other widths go to MinHasher's Python loop.
The loops themselves are numba functions (trident.curate.dedup.kernels.numba_loops); ``kernels()`` runs them from
the ahead-of-time extension trident.curate.dedup.kernels.build makes of them, or through numba's JIT where
none can be built. This module imports neither numba nor the loops until a function is called.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from trident.curate.dedup.kernels.build import kernels

_ASCII_SPACE = np.array([chr(b).isspace() for b in range(128)])
_WIDE_SPACES = np.array([c for c in range(128, 0x3001) if chr(c).isspace()], dtype=np.int64)
# XXH3's default secret (its first 128 bytes: all that inputs of 17-128 bytes use), as uint64 words.
_XXH3_SECRET = np.frombuffer(bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"), dtype="<u8").copy()


def _u8(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.uint64)


def _i8(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def xxh64_bytes(data: bytes) -> int:
    """xxh64 (seed 0) of ``data`` through the compiled code (for tests against the xxhash library)."""
    return int(kernels().xxh64_of(np.frombuffer(data, dtype=np.uint8).copy()))


@functools.cache
def _lower_table() -> np.ndarray:
    """int32 [65536]: the code point str.lower() gives each character of the Basic Multilingual Plane,
    -1 for the two it gives no single one (U+0130 İ: two characters; U+03A3 Σ: ς or σ by the next
    character). Made once a process (~3 ms), from str.lower itself: the same Unicode tables."""
    chars = "".join(map(chr, range(0x10000)))
    chars = chars[:0x130] + "\0" + chars[0x131:0x3A3] + "\0" + chars[0x3A4:]  # lower-cased one by one: no context
    table = np.frombuffer(chars.lower().encode("utf-32-le", "surrogatepass"), dtype=np.int32).copy()
    table[[0x130, 0x3A3]] = -1
    table[table >= 0x10000] = -1
    return table


_NO_TABLE = np.zeros(0, dtype=np.int32)


def utf8_texts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, bounds): texts[i] in UTF-8 (lone surrogates kept) is ``raw[bounds[i]:bounds[i+1]]``."""
    data = [t.encode("utf-8", errors="surrogatepass") for t in texts]
    bounds = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in data], out=bounds[1:])
    return np.frombuffer(b"".join(data), dtype=np.uint8), bounds


def normalised_bytes(texts: Sequence[str], utf8: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, bounds): ``normalize_for_shingles(texts[i])`` encoded is ``buf[bounds[i]:bounds[i+1]]``
    (``utf8``: ``utf8_texts(texts)``, when the caller has it). Lower-cased in the compiled pass (a
    table of str.lower for the Basic Multilingual Plane); a text with a character it does not cover
    (past U+FFFF, İ, Σ) is lower-cased by str.lower itself and normalised again."""
    raw, bounds = utf8 if utf8 is not None else utf8_texts(texts)
    table = _lower_table() if raw.max(initial=0) >= 0x80 else _NO_TABLE  # ASCII alone: no table to make
    buf, norm, flagged = kernels().normalise_kernel(raw, bounds, _ASCII_SPACE, _WIDE_SPACES, table)
    if not flagged.any():
        return buf, norm
    redo = np.flatnonzero(flagged)
    again, again_bounds, _ = kernels().normalise_kernel(*utf8_texts([texts[k].lower() for k in redo.tolist()]),
                                                        _ASCII_SPACE, _WIDE_SPACES, _NO_TABLE)
    pieces = [buf[norm[k] : norm[k + 1]] for k in range(len(texts))]
    for j, k in enumerate(redo.tolist()):
        pieces[k] = again[again_bounds[j] : again_bounds[j + 1]]
    return np.concatenate(pieces) if pieces else buf, np.r_[0, np.cumsum([len(x) for x in pieces])].astype(np.int64)


def _check_shingles(ngram: int, unit: str) -> None:
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    if unit not in ("char", "word"):
        raise ValueError(f"shingle unit must be 'char' or 'word', got {unit!r}")


def hashes_of_normalised(buf: np.ndarray, bounds: np.ndarray, ngram: int = 5, unit: str = "char",
                         packed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``shingle_hashes_flat`` of texts already normalised by ``normalised_bytes`` (its (buf, bounds));
    ``packed``: shingle keys instead (see the module docstring), for exact set comparisons only."""
    _check_shingles(ngram, unit)
    buf = np.ascontiguousarray(buf, dtype=np.uint8)
    return kernels().shingle_kernel(buf, _i8(bounds), int(ngram), unit == "word", bool(packed))


def shingle_hashes_flat(texts: Sequence[str], ngram: int = 5, unit: str = "char") -> tuple[np.ndarray, np.ndarray]:
    """(flat uint64 hashes, offsets int64 of length n+1): text i's shingle hashes, with repeats, are
    ``flat[offsets[i]:offsets[i+1]]``; as a set they equal ``shingles.shingle_hashes(texts[i], ngram, unit)``."""
    _check_shingles(ngram, unit)  # before the texts are normalised
    return hashes_of_normalised(*normalised_bytes(texts), ngram, unit)


def minhash_signatures(flat: np.ndarray, offsets: np.ndarray, multipliers: np.ndarray) -> np.ndarray:
    """MinHasher.signatures_from_flat, compiled: (n, len(multipliers)) uint32; an empty document
    gets all-0xFFFFFFFF."""
    return kernels().signature_kernel(_u8(flat), _i8(offsets), _u8(multipliers))


def shingle_signatures(buf: np.ndarray, bounds: np.ndarray, multipliers: np.ndarray, ngram: int = 5,
                       unit: str = "char") -> np.ndarray:
    """``minhash_signatures(*hashes_of_normalised(buf, bounds, ngram, unit), multipliers)`` in one pass
    that keeps no array of every shingle's hash."""
    _check_shingles(ngram, unit)
    return kernels().shingle_signature_kernel(np.ascontiguousarray(buf, dtype=np.uint8), _i8(bounds), int(ngram),
                                              unit == "word", _u8(multipliers))


def pair_jaccard(flat: np.ndarray, offsets: np.ndarray, first, second, at_least: float = 0.0) -> np.ndarray:
    """Jaccard (float64) of the hash sets of documents first[k] and second[k] (indices into
    ``offsets``; a document's hashes may repeat, in any order); 0.0 when both are empty. With
    ``at_least``, a pair whose Jaccard is below it (as float32) may stop early and get a value below
    it instead (a bound of its Jaccard); every pair at or above it gets its exact Jaccard."""
    return kernels().pair_jaccard(_u8(flat), _i8(offsets), _i8(first), _i8(second), float(at_least))


def band_keys(hasher, signatures: np.ndarray) -> np.ndarray:
    """``hasher.band_keys(signatures)`` (a MinHasher), compiled for bands of 17-128 bytes."""
    if not 17 <= 4 * hasher.rows <= 128:
        return hasher.band_keys(signatures)
    sig = np.ascontiguousarray(signatures, dtype=np.uint32)
    if sig.ndim != 2 or sig.shape[1] != hasher.num_hashes:
        raise ValueError(f"signatures must have shape (n, {hasher.num_hashes}), got {sig.shape}")
    return kernels().band_key_kernel(sig, int(hasher.bands), _XXH3_SECRET)
