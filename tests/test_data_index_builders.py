"""The index builders give exactly what the earlier (slower) code gave, and caches are mapped, not copied.

The reference functions below are trident's index builders as they were before issue 18 (sorting
with lexsort and searchsorted, permuting int64 ids); the current ones must match them bit for bit,
dtype included, on many random small cases.
"""
import mmap

import numpy as np
import pytest

from trident.config import DataConfig
from trident.data.build import build_datasets, split_documents
from trident.data.gpt_dataset import (GPTDataset, build_doc_idx, build_sample_idx, build_shuffle_idx,
                                      sort_random_keys, stable_argsort)
from trident.data.index_cache import load_or_build, smallest_int
from trident.data.indexed import IndexedDataset, IndexedDatasetBuilder


def reference_split(num_documents, valid_fraction, split_seed):
    n_valid = int(round(valid_fraction * num_documents))
    if valid_fraction > 0 and num_documents >= 2:
        n_valid = min(max(n_valid, 1), num_documents - 1)
    else:
        n_valid = min(n_valid, max(num_documents - 1, 0))
    order = np.random.default_rng(split_seed).permutation(num_documents)
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


def reference_doc_idx(documents, num_epochs, rng):
    orders = rng.permuted(np.tile(np.asarray(documents), (num_epochs, 1)), axis=1)
    return smallest_int(orders.reshape(-1))


def reference_sample_idx(sizes, doc_idx, seq_length, num_windows):
    lengths = np.asarray(sizes, dtype=np.int64)[np.asarray(doc_idx)]
    ends = np.cumsum(lengths)
    positions = np.arange(num_windows + 1, dtype=np.int64) * seq_length
    which = np.searchsorted(ends, positions, side="right")
    offsets = positions - (ends[which] - lengths[which])
    return smallest_int(np.stack([which, offsets], axis=1))


def reference_shuffle_idx(num_windows, tokens_per_epoch, seq_length, rng):
    windows = np.arange(num_windows, dtype=np.int64)
    epoch = windows * seq_length // tokens_per_epoch
    return smallest_int(np.lexsort((rng.random(num_windows), epoch)))


def assert_identical(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert np.array_equal(got, want), what


def test_split_matches_the_sorting_split():
    rng = np.random.default_rng(0)
    for case in range(60):
        n = int(rng.integers(1, 3000))
        fraction = float(rng.choice([0.0, 0.02, 0.1, 0.5, 0.97]))
        for got, want in zip(split_documents(n, fraction, case), reference_split(n, fraction, case)):
            assert_identical(got, want, f"n={n} fraction={fraction} seed={case}")


def test_doc_sample_and_shuffle_indices_match_the_earlier_code(loop_route):
    rng = np.random.default_rng(1)
    for case in range(80):
        num_docs = int(rng.integers(1, 60))
        # zero-length documents among short and long ones
        sizes = np.where(rng.random(num_docs) < 0.2, 0, rng.integers(1, 50, num_docs)).astype(np.int32)
        sizes[rng.integers(num_docs)] += 1  # at least one token
        documents = np.sort(rng.choice(num_docs, size=int(rng.integers(1, num_docs + 1)), replace=False))
        if sizes[documents].sum() == 0:
            sizes[documents[0]] = 3
        epochs, seq = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        doc_idx = build_doc_idx(documents.astype(np.int64), epochs, np.random.default_rng(case))
        want = reference_doc_idx(documents.astype(np.int64), epochs, np.random.default_rng(case))
        assert_identical(doc_idx, want, f"doc_idx case {case}")
        tokens = int(sizes[documents].sum())
        windows = (epochs * tokens - 1) // seq
        assert_identical(build_sample_idx(sizes, doc_idx, seq, windows),
                         reference_sample_idx(sizes, doc_idx, seq, windows), f"sample_idx case {case}")
        assert_identical(build_shuffle_idx(windows, tokens, seq, np.random.default_rng(case)),
                         reference_shuffle_idx(windows, tokens, seq, np.random.default_rng(case)),
                         f"shuffle_idx case {case}")


class TiedKeys:
    """An rng whose random keys repeat a lot, so the stable order of ties matters."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def random(self, n):
        return self.rng.integers(0, 4, n) / 4


@pytest.mark.parametrize("seed", range(5))
def test_shuffle_keeps_tied_keys_in_window_order(seed, loop_route):
    assert_identical(build_shuffle_idx(500, 37, 5, TiedKeys(seed)),
                     reference_shuffle_idx(500, 37, 5, TiedKeys(seed)), "tied keys")
    keys = TiedKeys(seed).random(1000)
    assert np.array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))
    assert np.array_equal(sort_random_keys(keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("keys", [[], [0.5], [0.0, 0.0], [1 - 2**-53, 0.0, 1 - 2**-53], [2.0, -1.0, 2.0]])
def test_key_sort_edges(keys, loop_route):
    keys = np.asarray(keys, dtype=np.float64)
    assert np.array_equal(sort_random_keys(keys), np.argsort(keys, kind="stable"))


def test_key_sort_of_many_random_keys():
    keys = np.random.default_rng(9).random(200_000)
    keys[::1000] = keys[1]  # some exact ties among them
    assert np.array_equal(sort_random_keys(keys), np.argsort(keys, kind="stable"))


def test_cache_entries_are_memory_mapped_when_built_and_when_read(tmp_path):
    build = lambda: {"a": np.arange(10)}  # noqa: E731
    built, from_cache = load_or_build(tmp_path, "x", {"k": 1}, ("a",), build)
    read, again = load_or_build(tmp_path, "x", {"k": 1}, ("a",), build)
    assert (from_cache, again) == (False, True)
    for arrays in (built, read):
        assert isinstance(arrays["a"], np.memmap) and not arrays["a"].flags.writeable
        assert arrays["a"].tolist() == list(range(10))


def is_mapped(array) -> bool:
    """True when the array's memory is a mapped file (np.memmap or a view of one), not a copy."""
    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = getattr(array, "base", None)
    return False


def write_corpus(prefix, num_docs, seed):
    builder = IndexedDatasetBuilder(prefix, np.int32)
    rng = np.random.default_rng(seed)
    for d in range(num_docs):
        builder.add_document(seed * 100_000 + d * 100 + np.arange(1, int(rng.integers(2, 40))))
    builder.finalize()


def test_built_datasets_read_the_split_and_indices_through_maps(tmp_path):
    write_corpus(tmp_path / "a", 50, 1)
    write_corpus(tmp_path / "b", 80, 2)
    config = DataConfig(paths=[0.4, str(tmp_path / "a"), 0.6, str(tmp_path / "b")], valid_fraction=0.1,
                        cache_dir=str(tmp_path / "cache"))
    first, _ = build_datasets(config, 16, 300, 20, seed=3)
    second, _ = build_datasets(config, 16, 300, 20, seed=3)
    assert second.from_cache and all(d.from_cache for d in second.datasets)
    for train in (first, second):
        arrays = [train.dataset_index, train.dataset_sample_index]
        arrays += [getattr(d, a) for d in train.datasets for a in ("documents", *GPTDataset.ARRAYS)]
        assert all(is_mapped(a) for a in arrays)
    assert all(np.array_equal(first[i], second[i]) for i in range(0, 300, 7))
    # the split's documents are those of split_documents, and another split is another cache entry
    want_train, _ = split_documents(80, 0.1, config.split_seed)
    assert np.array_equal(first.datasets[1].documents, want_train)
    other = DataConfig(**{**config.__dict__, "valid_fraction": 0.2})
    changed, _ = build_datasets(other, 16, 300, 20, seed=3)
    assert not any(d.from_cache for d in changed.datasets)
    assert len(changed.datasets[1].documents) == 64


def test_gpt_dataset_documents_key_replaces_the_digest(tmp_path):
    write_corpus(tmp_path / "c", 30, 4)
    indexed = IndexedDataset(tmp_path / "c")
    a = GPTDataset(indexed, np.arange(30), 8, 20, 0, cache_dir=tmp_path, documents_key={"all": 30})
    b = GPTDataset(indexed, np.arange(30), 8, 20, 0, cache_dir=tmp_path, documents_key={"all": 30})
    c = GPTDataset(indexed, np.arange(30), 8, 20, 0, cache_dir=tmp_path)
    assert (a.from_cache, b.from_cache, c.from_cache) == (False, True, False)
