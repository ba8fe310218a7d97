"""MinHash signatures and LSH band keys for near-duplicate detection.

Defaults follow the MT-NLG-era Megatron tools: character 5-gram shingles,
100 hash functions, 10 bands of 10 rows (docs/reference.md, Curation step 5).

Exact rules (docs/curation-dedup.md repeats them):
- Text is lower-cased and every whitespace run becomes one space before
  shingling, so re-wrapped or re-cased copies share shingles.
- ``unit="char"``: shingles are the distinct substrings of ``ngram``
  characters; a non-empty text shorter than that is one shingle.
  ``unit="word"``: shingles are ``ngram`` consecutive space-separated words.
- Each shingle is hashed once to 64 bits: xxh64 (seed 0) of its UTF-8 bytes.
  ``xxh64_slices`` (shingles.py) computes all character shingles of a text at once in numpy,
  one pass per distinct byte width (tested equal to the xxhash library).
- Hash function i is the seeded multiply-shift family (Dietzfelbinger et al.)
  ``h_i(x) = (a_i * x mod 2**64) >> 32`` with a_i odd, drawn from
  ``numpy.random.default_rng(seed)``. The signature holds, per function, the
  minimum over the document's shingles (uint32).
- Band j covers rows ``[j*r, (j+1)*r)`` with ``r = num_hashes // bands``; its
  key is xxh3_64 of those rows' bytes seeded with j. Two documents become a
  candidate pair when any band key matches, which for Jaccard s happens with
  probability ``1 - (1 - s**r)**b`` (the LSH S-curve).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import xxhash

from trident.curate.dedup.components import sorted_distinct, unique_pairs
from trident.curate.dedup.shingle_batch import shingle_hash_batch
from trident.curate.dedup.shingles import EMPTY_HASHES, shingle_hashes

BUCKET_DTYPE = [("band", "u2"), ("key", "u8"), ("doc", "u8")]  # an LSH bucket record: band, its key, doc
# Elements of the (hashes x shingles) matrix computed at once: bounds memory, stays in cache.
_CHUNK_ELEMENTS = 400_000


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct hash arrays (0.0 when both empty)."""
    if a.size == 0 and b.size == 0:
        return 0.0
    merged = np.concatenate((a, b))
    merged.sort(kind="stable")  # two sorted runs: the stable sort (timsort) merges them in one pass
    inter = int(np.count_nonzero(merged[1:] == merged[:-1]))
    return inter / (a.size + b.size - inter)


@dataclass
class MinHasher:
    """Computes MinHash signatures and LSH band keys with fixed, seeded hash functions."""

    num_hashes: int = 100
    bands: int = 10
    ngram: int = 5
    unit: str = "char"
    seed: int = 1
    _a: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_hashes < 1 or self.bands < 1:
            raise ValueError(f"num_hashes and bands must be >= 1, got {self.num_hashes}, {self.bands}")
        if self.num_hashes % self.bands:
            raise ValueError(
                f"num_hashes ({self.num_hashes}) must be a multiple of bands ({self.bands})"
            )
        if self.unit not in ("char", "word"):
            raise ValueError(f"shingle unit must be 'char' or 'word', got {self.unit!r}")
        rng = np.random.default_rng(self.seed)
        top = np.iinfo(np.uint64).max
        # Odd multipliers keep x -> a*x a bijection mod 2**64 (multiply-shift family).
        self._a = rng.integers(0, top, size=self.num_hashes, dtype=np.uint64, endpoint=True) | np.uint64(1)

    @property
    def multipliers(self) -> np.ndarray:
        """The odd multipliers a_i of the hash functions (uint64, one per function)."""
        return self._a

    @property
    def rows(self) -> int:
        """Signature rows per band."""
        return self.num_hashes // self.bands

    @property
    def threshold(self) -> float:
        """Jaccard at which the S-curve is steepest, approximately (1/b)**(1/r)."""
        return (1.0 / self.bands) ** (1.0 / self.rows)

    def hashes(self, text: str) -> np.ndarray:
        """Sorted distinct shingle hashes of ``text`` under this hasher's shingling."""
        return shingle_hashes(text, self.ngram, self.unit)

    def signatures_from_hashes(self, hash_sets: Sequence[np.ndarray]) -> np.ndarray:
        """Signatures (n, num_hashes) uint32 for n shingle-hash arrays.

        An empty hash set gets all-0xFFFFFFFF; callers should not bucket it.
        """
        counts = np.fromiter((h.size for h in hash_sets), dtype=np.int64, count=len(hash_sets))
        flat = np.concatenate(hash_sets).astype(np.uint64, copy=False) if len(hash_sets) else EMPTY_HASHES
        return self.signatures_from_flat(flat, np.r_[0, np.cumsum(counts)])

    def signatures_from_flat(self, flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Signatures (n, num_hashes) uint32 of n documents whose shingle hashes are
        ``flat[offsets[i]:offsets[i+1]]`` (repeats allowed: they do not change a minimum).

        An empty document gets all-0xFFFFFFFF; callers should not bucket it.
        """
        n = len(offsets) - 1
        sig = np.full((n, self.num_hashes), np.iinfo(np.uint64).max, dtype=np.uint64)
        if n <= 0:
            return np.zeros((0, self.num_hashes), dtype=np.uint32)
        offsets = np.asarray(offsets, dtype=np.int64)
        signed = np.flatnonzero(np.diff(offsets) > 0)  # empty documents own no column
        first = offsets[signed]
        chunk = max(1, _CHUNK_ELEMENTS // self.num_hashes)
        product = np.empty((self.num_hashes, min(chunk, flat.size)), dtype=np.uint64)  # reused: no page faults
        a = self._a[:, None]
        for start in range(0, flat.size, chunk):
            part = flat[start : start + chunk]
            # The documents this chunk overlaps, and where each begins inside it.
            lo = np.searchsorted(first, start, "right") - 1
            hi = np.searchsorted(first, start + part.size, "left")
            local = first[lo:hi] - start
            local[0] = 0
            # (hashes x shingles): each row's reduction runs over contiguous memory, about 2x
            # faster than the transpose. uint64 wraps modulo 2**64, the family's definition.
            values = np.multiply(a, part[None, :], out=product[:, : part.size])
            mins = np.minimum.reduceat(values, local, axis=1)
            docs = signed[lo:hi]
            sig[docs] = np.minimum(sig[docs], mins.T)
        # The shift is monotonic, so shifting the minimum equals the minimum of shifts.
        return (sig >> np.uint64(32)).astype(np.uint32)

    def signatures(self, texts: Iterable[str]) -> np.ndarray:
        """Signatures (n, num_hashes) uint32 for ``texts`` (shingled in batches)."""
        return self.signatures_from_flat(*shingle_hash_batch(list(texts), self.ngram, self.unit))

    def band_keys(self, signatures: np.ndarray) -> np.ndarray:
        """LSH keys (n, bands) uint64: band j's key is xxh3_64(rows of band j, seed=j)."""
        sig = np.ascontiguousarray(signatures, dtype=np.uint32)
        if sig.ndim != 2 or sig.shape[1] != self.num_hashes:
            raise ValueError(f"signatures must have shape (n, {self.num_hashes}), got {sig.shape}")
        n, r = sig.shape[0], self.rows
        keys = np.empty((n, self.bands), dtype=np.uint64)
        width, digest = 4 * r, xxhash.xxh3_64_intdigest
        for j in range(self.bands):
            band = memoryview(np.ascontiguousarray(sig[:, j * r : (j + 1) * r]).tobytes())
            # One bytes object per band, sliced by zero-copy views: no allocation per row.
            keys[:, j] = np.fromiter((digest(band[o : o + width], j) for o in range(0, n * width, width)),
                                     dtype=np.uint64, count=n)
        return keys


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """MinHash estimate of Jaccard: the fraction of signature rows that agree."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signature shapes differ: {sig_a.shape} vs {sig_b.shape}")
    return float(np.mean(sig_a == sig_b))


def _repeated_keys(key: np.ndarray) -> np.ndarray:
    """Indices of the entries whose key occurs more than once: only those can share a bucket. One
    sort of the keys finds the repeated values (numpy's sort of bare uint64 is several times faster
    than an argsort); a bit table of their low bits passes a few percent more entries, which a
    search among the repeated values then drops."""
    ordered = np.sort(key)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(repeated) == 0:
        return np.zeros(0, dtype=np.int64)
    mask = np.uint64((1 << max(16, len(key).bit_length() + 2)) - 1)  # about 4 slots a key
    marked = np.zeros(int(mask) + 1, dtype=bool)
    marked[repeated & mask] = True
    maybe = np.flatnonzero(marked[key & mask])
    found = np.minimum(np.searchsorted(repeated, key[maybe]), len(repeated) - 1)
    return maybe[repeated[found] == key[maybe]]


def bucket_pairs(band: np.ndarray, key: np.ndarray, doc: np.ndarray,
                 all_pairs_up_to: int = 32) -> tuple[np.ndarray, int]:
    """Candidate pairs (k, 2) uint64, each row (smaller doc, larger doc), from LSH bucket entries.

    Entries with equal (band, key) share a bucket. A bucket of m <= ``all_pairs_up_to`` documents
    yields all m(m-1)/2 pairs; a larger one yields each member paired with the bucket's smallest
    document and with its predecessor (2m pairs, not m^2), enough to connect a cluster of
    near-copies whose members resemble the first one. Returns (unique pairs, buckets with >= 2 docs).
    """
    keep = _repeated_keys(key)  # nearly every bucket holds one document: sort only the others
    band, key, doc = band[keep], key[keep], doc[keep]
    if len(doc) == 0:
        return np.zeros((0, 2), dtype=np.uint64), 0
    order = np.lexsort((doc, key, band))
    band, key, doc = band[order], key[order], doc[order]
    same = (band[1:] == band[:-1]) & (key[1:] == key[:-1])
    starts = np.flatnonzero(np.r_[True, ~same])
    sizes = np.diff(np.r_[starts, len(doc)])
    # A bucket's documents are sorted; one listed twice (never, from one signing pass) takes the loop.
    repeated = np.zeros(len(starts), dtype=bool)
    repeated[np.searchsorted(starts, np.flatnonzero(same & (doc[1:] == doc[:-1])), "right") - 1] = True
    chunks, buckets = [np.zeros((0, 2), dtype=doc.dtype)], 0
    # Buckets of one size at once (nearly all hold 2-4 documents): all pairs by index arithmetic.
    for m in sorted_distinct(sizes[(sizes >= 2) & (sizes <= all_pairs_up_to) & ~repeated]).tolist():
        first = starts[(sizes == m) & ~repeated]
        i, j = np.triu_indices(m, k=1)
        chunks.append(np.stack([doc[first[:, None] + i].ravel(), doc[first[:, None] + j].ravel()], axis=1))
        buckets += len(first)
    for start, size in zip(starts[(sizes > 2) & ((sizes > all_pairs_up_to) | repeated)].tolist(),
                           sizes[(sizes > 2) & ((sizes > all_pairs_up_to) | repeated)].tolist()):
        members = sorted_distinct(doc[start : start + size])
        m = len(members)
        if m < 2:
            continue
        if m <= all_pairs_up_to:
            i, j = np.triu_indices(m, k=1)
        else:
            i = np.r_[np.zeros(m - 1, dtype=np.int64), np.arange(1, m - 1)]
            j = np.r_[np.arange(1, m), np.arange(2, m)]
        chunks.append(np.stack([members[i], members[j]], axis=1))
        buckets += 1
    pairs = np.concatenate(chunks).astype(np.uint64)
    return unique_pairs(pairs), buckets
