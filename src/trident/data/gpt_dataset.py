"""Packed GPT training samples from an indexed dataset, as Megatron's GPTDataset.

Documents (each already ending in EOD) are laid end to end and cut into windows of seq_length+1
tokens; window j covers stream positions [j*s, (j+1)*s], so consecutive windows share exactly one
token (the last target of one is the first input of the next). Three index arrays do this:

  doc_idx      the document order: one seeded permutation of the documents per epoch, concatenated
  sample_idx   (n+1, 2): window j starts at (position in doc_idx, token offset) sample_idx[j] and
               ends, inclusive, at sample_idx[j+1]
  shuffle_idx  the order windows are served in: a seeded permutation within each epoch's windows,
               so all of epoch e is consumed before epoch e+1

As many epochs are built as needed for `num_samples` windows. Sample i depends only on the
inputs and i, so a resumed run continues from sample index = samples consumed.
"""
from __future__ import annotations

import numpy as np

from trident.data.compiled import loop
from trident.data.index_cache import array_digest, load_or_build, smallest_int
from trident.data.indexed import IndexedDataset, data_file, index_file
from trident.text.storage import fingerprint

MAX_DOC_IDX = 2**32  # epochs x documents beyond this is a configuration mistake, not a dataset


def num_epochs_needed(tokens_per_epoch: int, seq_length: int, num_samples: int) -> int:
    """The fewest epochs whose token stream holds `num_samples` windows of seq_length+1."""
    if tokens_per_epoch <= 0:
        raise ValueError("cannot build samples from a dataset split with no tokens")
    # windows from E epochs: (E*T - 1) // s; solve (E*T - 1) // s >= n  <=>  E*T >= n*s + 1
    return max(1, -(-(num_samples * seq_length + 1) // tokens_per_epoch))


def build_doc_idx(documents: np.ndarray, num_epochs: int, rng: np.random.Generator) -> np.ndarray:
    """One independent permutation of `documents` per epoch, concatenated."""
    documents = np.asarray(documents)
    # int32 when the ids fit: the shuffle draws the same numbers for any item size, moves half the bytes
    orders = np.tile(smallest_int(documents), (num_epochs, 1))
    # one row per epoch, each row shuffled on its own, in place (tiny corpora need many epochs)
    rng.permuted(orders, axis=1, out=orders)
    return smallest_int(orders.reshape(-1))


def _place_windows(sizes, doc_idx, seq_length, sample_idx):
    """Fill sample_idx row j with (position in doc_idx, offset) of stream position j*seq_length;
    returns the rows filled (fewer than len(sample_idx) when the documents run out)."""
    row, start = 0, 0
    for k in range(len(doc_idx)):
        end = start + sizes[doc_idx[k]]
        # every window start inside this document (none in a zero-length one)
        while row < len(sample_idx) and row * seq_length < end:
            sample_idx[row, 0] = k
            sample_idx[row, 1] = row * seq_length - start
            row += 1
        if row == len(sample_idx):
            break
        start = end
    return row


def build_sample_idx(sizes: np.ndarray, doc_idx: np.ndarray, seq_length: int,
                     num_windows: int) -> np.ndarray:
    """(num_windows+1, 2) [position in doc_idx, offset]: where each window starts in the stream.

    Window j starts at stream position j*seq_length; the returned row j+1 is also window j's last
    token. Zero-length documents are skipped naturally (no window starts inside one). One pass over
    the documents, compiled when long (as Megatron's C++ helper); int32 when every value fits, else int64.
    """
    sizes, doc_idx = np.asarray(sizes), np.asarray(doc_idx)
    int32_max = np.iinfo(np.int32).max
    # positions < len(doc_idx) and offsets < the largest size: int32 is safe when both bounds fit
    surely_int32 = len(doc_idx) <= int32_max and (len(sizes) == 0 or int(sizes.max()) <= int32_max)
    sample_idx = np.empty((num_windows + 1, 2), dtype=np.int32 if surely_int32 else np.int64)
    filled = loop(_place_windows, len(doc_idx) + num_windows)(sizes, doc_idx, seq_length, sample_idx)
    if filled < num_windows + 1:
        tokens = int(sizes[doc_idx].sum(dtype=np.int64))
        raise ValueError(f"{num_windows} windows of {seq_length + 1} tokens need "
                         f"{num_windows * seq_length + 1} tokens; the document order holds {tokens}")
    return sample_idx if surely_int32 else smallest_int(sample_idx)


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable"), from the faster unstable sort: equal keys (rare among random
    floats, but possible) are put back in index order."""
    order = np.argsort(keys)
    ordered = keys[order]
    tied = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tied):
        # runs of equal keys: each run starts where the previous position is not tied to it
        run_starts = tied[np.r_[True, tied[1:] != tied[:-1] + 1]]
        run_ends = tied[np.r_[tied[1:] != tied[:-1] + 1, True]] + 2
        for start, end in zip(run_starts, run_ends):
            order[start:end].sort()
    return order


def _bucket_argsort(keys, order):
    """order = the stable argsort of keys, every key in [0, 1): bucket i/n holds the keys in
    [i/n, (i+1)/n), filled in index order (stable); then an insertion sort (strict >, stable)
    inside each bucket, of one key on average for uniform keys. O(n) instead of O(n log n)."""
    n = len(keys)
    starts = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        starts[min(int(keys[i] * n), n - 1) + 1] += 1  # fl(key * n) never decreases as key grows
    for b in range(n):
        starts[b + 1] += starts[b]
    fill = starts[:n].copy()
    for i in range(n):
        b = min(int(keys[i] * n), n - 1)
        order[fill[b]] = i
        fill[b] += 1
    for b in range(n):
        for p in range(starts[b] + 1, starts[b + 1]):
            item, q = order[p], p
            while q > starts[b] and keys[order[q - 1]] > keys[item]:
                order[q] = order[q - 1]
                q -= 1
            order[q] = item


def sort_random_keys(keys: np.ndarray) -> np.ndarray:
    """The stable argsort of `keys`: by buckets (compiled when many) when all lie in [0, 1), as
    Generator.random's do, else stable_argsort."""
    if len(keys) == 0 or not (keys.min() >= 0.0 and keys.max() < 1.0):
        return stable_argsort(keys)
    order = np.empty(len(keys), dtype=np.int64)
    loop(_bucket_argsort, 4 * len(keys))(keys, order)
    return order


def build_shuffle_idx(num_windows: int, tokens_per_epoch: int, seq_length: int,
                      rng: np.random.Generator) -> np.ndarray:
    """A permutation of range(num_windows) that shuffles only within each epoch's windows.

    Window j belongs to the epoch in which it starts: epoch (j * s) // T. The order is that of
    sorting by (epoch, random key), stable.
    """
    keys = rng.random(num_windows)
    shuffle_idx = np.empty(num_windows, dtype=np.int64)
    start = 0
    while start < num_windows:
        # epoch e's windows are j with e*T <= j*s < (e+1)*T: a contiguous run, sorted on its own
        epoch = start * seq_length // tokens_per_epoch
        stop = min(num_windows, -(-((epoch + 1) * tokens_per_epoch) // seq_length))
        shuffle_idx[start:stop] = sort_random_keys(keys[start:stop])
        shuffle_idx[start:stop] += start
        start = stop
    return smallest_int(shuffle_idx)


def build_indices(sizes: np.ndarray, documents: np.ndarray, seq_length: int, num_samples: int,
                  seed: int) -> dict[str, np.ndarray]:
    """doc_idx, sample_idx and shuffle_idx for `num_samples` windows (pure; no I/O)."""
    documents = np.asarray(documents, dtype=np.int64)
    tokens_per_epoch = int(np.asarray(sizes, dtype=np.int64)[documents].sum())
    epochs = num_epochs_needed(tokens_per_epoch, seq_length, num_samples)
    if epochs * len(documents) > MAX_DOC_IDX:
        raise ValueError(f"{num_samples} samples of {seq_length + 1} tokens need {epochs} epochs over "
                         f"{tokens_per_epoch} tokens ({len(documents)} documents): too many; "
                         f"use more data or fewer samples")
    # separate streams, so changing one construction never silently shifts another
    doc_rng, shuffle_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    doc_idx = build_doc_idx(documents, epochs, doc_rng)
    num_windows = (epochs * tokens_per_epoch - 1) // seq_length
    sample_idx = build_sample_idx(sizes, doc_idx, seq_length, num_windows)
    shuffle_idx = build_shuffle_idx(num_windows, tokens_per_epoch, seq_length, shuffle_rng)
    return {"doc_idx": doc_idx, "sample_idx": sample_idx, "shuffle_idx": shuffle_idx}


class GPTDataset:
    """`num_samples` packed windows of seq_length+1 int64 tokens drawn from `documents`.

    `ds[i]` is deterministic in (data files, documents, seq_length, num_samples, seed, i).
    The index arrays are cached in `cache_dir` and memory-mapped from there; `from_cache` says
    whether they were loaded rather than built. `documents_key` (JSON-able) must identify
    `documents` uniquely when given; it keys the cache instead of a digest of the ids.
    """

    ARRAYS = ("doc_idx", "sample_idx", "shuffle_idx")

    def __init__(self, indexed: IndexedDataset, documents, seq_length: int, num_samples: int,
                 seed: int, cache_dir=None, name: str = "gpt", documents_key: dict | None = None):
        if seq_length < 1:
            raise ValueError(f"seq_length must be >= 1, got {seq_length}")
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        self.indexed = indexed
        self.documents = np.asarray(documents, dtype=np.int64)
        if len(self.documents) == 0:
            raise ValueError(f"{indexed.prefix}: the {name!r} split has no documents")
        self.seq_length = seq_length
        self.num_samples = num_samples
        self.seed = seed
        inputs = {
            "data": [fingerprint(data_file(indexed.prefix)), fingerprint(index_file(indexed.prefix))],
            # what identifies the document ids: the caller's description of how they were chosen
            # (e.g. the split's inputs: no pass over hundreds of millions of ids), else their digest
            "documents": documents_key if documents_key is not None else array_digest(self.documents),
            "num_documents": len(self.documents),
            "seq_length": seq_length, "num_samples": num_samples, "seed": seed,
        }
        build = lambda: build_indices(indexed.sizes, self.documents, seq_length, num_samples, seed)  # noqa: E731
        if cache_dir is None:
            arrays, self.from_cache = build(), False
        else:
            cache_name = f"{indexed.prefix.name}.{name}"
            arrays, self.from_cache = load_or_build(cache_dir, cache_name, inputs, self.ARRAYS, build)
        self.doc_idx = arrays["doc_idx"]
        self.sample_idx = arrays["sample_idx"]
        self.shuffle_idx = arrays["shuffle_idx"]

    @property
    def num_windows(self) -> int:
        """Windows built (>= num_samples: the last epoch is built whole enough to cover them)."""
        return len(self.sample_idx) - 1

    def __len__(self) -> int:
        return self.num_samples

    def window(self, j: int) -> np.ndarray:
        """Window j in stream order (before shuffling)."""
        (first, start), (last, stop) = self.sample_idx[j], self.sample_idx[j + 1]
        get = self.indexed.get
        if first == last:
            parts = [get(int(self.doc_idx[first]), int(start), int(stop - start + 1))]
        else:
            parts = [get(int(self.doc_idx[first]), int(start))]
            parts += [get(int(self.doc_idx[k])) for k in range(first + 1, last)]
            parts.append(get(int(self.doc_idx[last]), 0, int(stop + 1)))
        return np.concatenate(parts).astype(np.int64)

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} out of range for {self.num_samples} samples")
        return self.window(int(self.shuffle_idx[i]))

    def sample_spans(self, i: int) -> list[tuple[int, int, int]]:
        """Sample i's documents as (document index in the .bin/.idx, first token, end token): the
        token span of each document the window holds."""
        j = int(self.shuffle_idx[i])
        (first, start), (last, stop) = self.sample_idx[j], self.sample_idx[j + 1]
        spans = []
        for k in range(int(first), int(last) + 1):
            doc = int(self.doc_idx[k])
            begin = int(start) if k == first else 0
            end = int(stop) + 1 if k == last else int(self.indexed.sizes[doc])
            spans.append((doc, begin, end))
        return spans
