"""Packing documents into seq_len+1 windows (GPTDataset): coverage, overlap, shuffling, cache, split."""
import numpy as np
import pytest

from trident.config import DataConfig
from trident.data.build import build_datasets, split_documents
from trident.data.gpt_dataset import GPTDataset, build_indices, num_epochs_needed
from trident.data.indexed import IndexedDataset, IndexedDatasetBuilder

SEQ = 8


def write_docs(prefix, num_docs=30, seed=0, base=0):
    """Documents whose tokens are all distinct (doc d, position p -> base + d*1000 + p + 1)."""
    rng = np.random.default_rng(seed)
    docs = [base + d * 1000 + 1 + np.arange(rng.integers(1, 25)) for d in range(num_docs)]
    builder = IndexedDatasetBuilder(prefix, np.int32)
    for doc in docs:
        builder.add_document(doc)
    builder.finalize()
    return docs


@pytest.fixture
def corpus(tmp_path):
    docs = write_docs(tmp_path / "c")
    return IndexedDataset(tmp_path / "c"), docs


def stream(ds: GPTDataset):
    return np.concatenate([ds.indexed[int(d)] for d in ds.doc_idx])


def test_windows_have_seq_plus_one_tokens_and_overlap_by_one(corpus):
    indexed, docs = corpus
    ds = GPTDataset(indexed, np.arange(len(docs)), SEQ, num_samples=100, seed=3)
    assert len(ds) == 100 and ds.num_windows >= 100
    windows = [ds.window(j) for j in range(ds.num_windows)]
    assert all(w.shape == (SEQ + 1,) and w.dtype == np.int64 for w in windows)
    for a, b in zip(windows, windows[1:]):
        assert a[-1] == b[0]
    # the windows, minus their shared tokens, are exactly the document stream in doc_idx order
    rebuilt = np.concatenate([windows[0]] + [w[1:] for w in windows[1:]])
    assert np.array_equal(rebuilt, stream(ds)[: len(rebuilt)])


def test_each_epoch_is_a_permutation_of_the_documents(corpus):
    indexed, docs = corpus
    ds = GPTDataset(indexed, np.arange(len(docs)), SEQ, num_samples=200, seed=3)
    epochs = len(ds.doc_idx) // len(docs)
    assert epochs == num_epochs_needed(indexed.num_tokens, SEQ, 200) and epochs >= 2
    for e in range(epochs):
        assert sorted(ds.doc_idx[e * len(docs):(e + 1) * len(docs)]) == list(range(len(docs)))
    assert not np.array_equal(ds.doc_idx[: len(docs)], np.arange(len(docs)))  # shuffled


def test_every_corpus_token_is_served(corpus):
    indexed, docs = corpus
    one_epoch = (indexed.num_tokens - 1) // SEQ
    ds = GPTDataset(indexed, np.arange(len(docs)), SEQ, num_samples=one_epoch + 1, seed=5)
    served = set(np.concatenate([ds[i] for i in range(len(ds))]).tolist())
    assert served >= set(np.concatenate(docs).tolist())


def test_shuffle_stays_within_epochs(corpus):
    indexed, docs = corpus
    ds = GPTDataset(indexed, np.arange(len(docs)), SEQ, num_samples=300, seed=1)
    first_epoch = -(-indexed.num_tokens // SEQ)  # windows starting in epoch 0
    assert sorted(ds.shuffle_idx[:first_epoch]) == list(range(first_epoch))
    assert sorted(ds.shuffle_idx) == list(range(ds.num_windows))
    assert not np.array_equal(ds.shuffle_idx[:first_epoch], np.arange(first_epoch))


def test_deterministic_per_seed_and_index(corpus):
    indexed, docs = corpus
    docs_ids = np.arange(len(docs))
    a = GPTDataset(indexed, docs_ids, SEQ, 50, seed=7)
    b = GPTDataset(indexed, docs_ids, SEQ, 50, seed=7)
    c = GPTDataset(indexed, docs_ids, SEQ, 50, seed=8)
    # a resumed run reads sample i directly, without replaying 0..i-1
    assert np.array_equal(b[37], a[37])
    assert all(np.array_equal(a[i], b[i]) for i in range(50))
    assert any(not np.array_equal(a[i], c[i]) for i in range(50))
    with pytest.raises(IndexError):
        a[50]


def test_indices_handle_empty_documents(tmp_path):
    b = IndexedDatasetBuilder(tmp_path / "e", np.int32)
    for doc in ([], [1, 2, 3], [], [], [4, 5], [6, 7, 8, 9, 10], []):
        b.add_document(doc)
    b.finalize()
    ds = GPTDataset(IndexedDataset(tmp_path / "e"), np.arange(7), 3, 4, seed=0)
    assert all(ds[i].shape == (4,) for i in range(4))
    arrays = build_indices(ds.indexed.sizes, np.arange(7), 3, 4, 0)
    assert np.array_equal(arrays["sample_idx"], ds.sample_idx)


def test_cache_reused_then_invalidated(tmp_path):
    write_docs(tmp_path / "c")
    indexed = IndexedDataset(tmp_path / "c")
    cache = tmp_path / "cache"
    first = GPTDataset(indexed, np.arange(30), SEQ, 40, seed=1, cache_dir=cache, name="train")
    files = sorted(cache.iterdir())
    assert not first.from_cache and len(files) == 4  # three arrays + the description
    mtimes = {f: f.stat().st_mtime_ns for f in files}
    second = GPTDataset(indexed, np.arange(30), SEQ, 40, seed=1, cache_dir=cache, name="train")
    assert second.from_cache and isinstance(second.shuffle_idx, np.memmap)
    assert {f: f.stat().st_mtime_ns for f in sorted(cache.iterdir())} == mtimes
    assert all(np.array_equal(first[i], second[i]) for i in range(40))
    assert not GPTDataset(indexed, np.arange(30), SEQ, 40, seed=2, cache_dir=cache).from_cache
    assert not GPTDataset(indexed, np.arange(29), SEQ, 40, seed=1, cache_dir=cache).from_cache
    # new data under the same prefix: the key changes with the files' size/mtime
    write_docs(tmp_path / "c", num_docs=31, seed=9)
    changed = GPTDataset(IndexedDataset(tmp_path / "c"), np.arange(30), SEQ, 40, seed=1,
                         cache_dir=cache, name="train")
    assert not changed.from_cache


def test_split_by_documents():
    train, valid = split_documents(100, 0.1, split_seed=3)
    assert len(valid) == 10 and len(train) == 90
    assert not set(train) & set(valid) and set(train) | set(valid) == set(range(100))
    assert np.array_equal(split_documents(100, 0.1, 3)[1], valid)
    assert not np.array_equal(split_documents(100, 0.1, 4)[1], valid)
    assert len(split_documents(5, 0.02, 0)[1]) == 1  # tiny data still gets a valid document
    assert len(split_documents(1, 0.5, 0)[1]) == 0  # ... unless that would leave no training data
    assert len(split_documents(10, 0.0, 0)[1]) == 0
    with pytest.raises(ValueError, match="valid_fraction"):
        split_documents(10, 1.0, 0)


def test_build_datasets_from_config(tmp_path, monkeypatch):
    docs = write_docs(tmp_path / "data" / "c", num_docs=40)
    monkeypatch.chdir(tmp_path)
    config = DataConfig(paths=["data/c"], valid_fraction=0.1, split_seed=1)  # relative to cwd
    train, valid = build_datasets(config, SEQ, train_samples=60, valid_samples=10, seed=4)
    assert len(train) == 60 and len(valid) == 10
    assert (tmp_path / "data" / "index-cache").is_dir()  # cache next to the data by default
    tokens = lambda ds: set(np.concatenate([ds[i] for i in range(len(ds))]).tolist())  # noqa: E731
    doc_of = {int(t): d for d, doc in enumerate(docs) for t in doc}
    train_docs = {doc_of[t] for t in tokens(train)}
    valid_docs = {doc_of[t] for t in tokens(valid)}
    assert not train_docs & valid_docs and len(valid_docs) <= 4
    again, _ = build_datasets(config, SEQ, 60, 10, seed=4)
    assert again.from_cache and np.array_equal(again[59], train[59])


def test_valid_split_empty_for_single_document(tmp_path):
    b = IndexedDatasetBuilder(tmp_path / "one", np.int32)
    b.add_document(np.arange(1, 100))
    b.finalize()
    config = DataConfig(paths=[str(tmp_path / "one")], valid_fraction=0.5, cache_dir=str(tmp_path / "cc"))
    train, valid = build_datasets(config, SEQ, 5, 5, seed=0)
    assert len(train) == 5 and len(valid) == 0
    with pytest.raises(IndexError):
        valid[0]


def test_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="data.paths is empty"):
        build_datasets(DataConfig(paths=[]), SEQ, 1, 1, 0)
    with pytest.raises(FileNotFoundError, match="nope.idx"):
        build_datasets(DataConfig(paths=[str(tmp_path / "nope")]), SEQ, 1, 1, 0)
    with pytest.raises(ValueError, match="pairs"):
        build_datasets(DataConfig(paths=[0.5, "a", 0.5]), SEQ, 1, 1, 0)


def test_tiny_corpus_repeats_over_many_epochs(tmp_path, monkeypatch):
    b = IndexedDatasetBuilder(tmp_path / "t", np.int32)
    b.add_document([1, 2, 0])
    b.add_document([3, 0])
    b.finalize()
    indexed = IndexedDataset(tmp_path / "t")
    ds = GPTDataset(indexed, np.arange(2), SEQ, 50, seed=0)
    epochs = len(ds.doc_idx) // 2
    assert epochs == num_epochs_needed(5, SEQ, 50) and epochs > 50
    assert all(sorted(ds.doc_idx[2 * e:2 * e + 2]) == [0, 1] for e in range(epochs))
    assert all(ds[i].shape == (SEQ + 1,) for i in range(50))
    import trident.data.gpt_dataset as gd

    monkeypatch.setattr(gd, "MAX_DOC_IDX", 100)
    with pytest.raises(ValueError, match="too many"):
        GPTDataset(indexed, np.arange(2), SEQ, 50, seed=0)
