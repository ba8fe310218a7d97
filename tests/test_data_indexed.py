"""Megatron indexed dataset (.bin/.idx): byte layout against the spec, mmap reader, errors."""
import struct

import numpy as np
import pytest

from trident.data.indexed import (IndexedDataset, IndexedDatasetBuilder, best_dtype, data_file,
                                  index_file)

DOCS = [[5, 6, 7, 0], [8, 0], [9, 10, 11, 12, 13, 0]]


def spec_index_bytes(sizes, doc_idx, code, itemsize):
    """The .idx bytes written by hand from the format description (docs/reference.md)."""
    out = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code)
    out += struct.pack("<Q", len(sizes)) + struct.pack("<Q", len(doc_idx))
    out += struct.pack(f"<{len(sizes)}i", *sizes)
    pointers, offset = [], 0
    for size in sizes:
        pointers.append(offset)
        offset += size * itemsize
    out += struct.pack(f"<{len(sizes)}q", *pointers)
    out += struct.pack(f"<{len(doc_idx)}q", *doc_idx)
    return out


@pytest.mark.parametrize("dtype,code", [(np.uint16, 8), (np.int32, 4)])
def test_builder_writes_spec_bytes(tmp_path, dtype, code):
    builder = IndexedDatasetBuilder(tmp_path / "ds", dtype)
    builder.add_document(DOCS[0])
    builder.add_document(np.array(DOCS[1]))
    builder.add_document(DOCS[2])
    builder.finalize()
    itemsize = np.dtype(dtype).itemsize
    sizes = [len(d) for d in DOCS]
    assert index_file(tmp_path / "ds").read_bytes() == spec_index_bytes(sizes, [0, 1, 2, 3], code, itemsize)
    fmt = "<" + ("H" if dtype == np.uint16 else "i") * sum(sizes)
    assert data_file(tmp_path / "ds").read_bytes() == struct.pack(fmt, *[t for d in DOCS for t in d])


def test_reader_reads_hand_written_files(tmp_path):
    # a dataset with several sequences per document, as Megatron's sentence-split mode writes
    sizes, doc_idx = [3, 2, 4, 1], [0, 2, 4]
    tokens = list(range(100, 110))
    (tmp_path / "hand.idx").write_bytes(spec_index_bytes(sizes, doc_idx, 4, 4))
    (tmp_path / "hand.bin").write_bytes(struct.pack("<10i", *tokens))
    ds = IndexedDataset(tmp_path / "hand")
    assert ds.dtype == np.int32 and len(ds) == 4
    assert ds.sizes.tolist() == sizes and ds.doc_idx.tolist() == doc_idx
    assert ds.pointers.tolist() == [0, 12, 20, 36]
    assert ds[0].tolist() == [100, 101, 102]
    assert ds[2].tolist() == [105, 106, 107, 108]
    assert ds[-1].tolist() == [109]
    assert ds.get(2, offset=1, length=2).tolist() == [106, 107]
    assert ds.get(2, offset=3).tolist() == [108]
    assert ds.num_tokens == 10


def test_reader_is_memory_mapped_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 60000, size=rng.integers(1, 50)) for _ in range(200)]
    builder = IndexedDatasetBuilder(tmp_path / "r", np.uint16)
    for d in docs:
        builder.add_document(d)
    builder.finalize()
    ds = IndexedDataset(tmp_path / "r")
    assert isinstance(ds._bin, np.memmap)
    assert not ds[0].flags.writeable  # a view of the read-only mapping, not a copy
    for i in (0, 17, 199):
        assert np.array_equal(ds[i], docs[i])


def test_empty_dataset_and_empty_documents(tmp_path):
    IndexedDatasetBuilder(tmp_path / "e").finalize()
    empty = IndexedDataset(tmp_path / "e")
    assert len(empty) == 0 and empty.doc_idx.tolist() == [0]
    b = IndexedDatasetBuilder(tmp_path / "z")
    b.add_document([])
    b.add_document([1])
    b.finalize()
    ds = IndexedDataset(tmp_path / "z")
    assert ds[0].tolist() == [] and ds[1].tolist() == [1]


def test_best_dtype_follows_megatron_rule():
    assert best_dtype(50257) == np.uint16
    assert best_dtype(65499) == np.uint16
    assert best_dtype(65500) == np.int32


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.idx"):
        IndexedDataset(tmp_path / "missing")
    b = IndexedDatasetBuilder(tmp_path / "x", np.uint16)
    with pytest.raises(ValueError, match="outside the range"):
        b.add_document([70000])
    b.abort()
    assert not data_file(tmp_path / "x").exists()
    (tmp_path / "bad.idx").write_bytes(b"NOTMAGIC\x00" + bytes(25))
    (tmp_path / "bad.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="bad magic"):
        IndexedDataset(tmp_path / "bad")
    # a .bin shorter than the index promises (interrupted copy)
    (tmp_path / "short.idx").write_bytes(spec_index_bytes([4], [0, 1], 8, 2))
    (tmp_path / "short.bin").write_bytes(b"\x01\x00")
    with pytest.raises(ValueError, match="truncated"):
        IndexedDataset(tmp_path / "short")
    ok = tmp_path / "ok"
    b = IndexedDatasetBuilder(ok)
    b.add_document([1, 2])
    b.finalize()
    with pytest.raises(IndexError):
        IndexedDataset(ok).get(0, offset=1, length=5)
    with pytest.raises(IndexError):
        IndexedDataset(ok)[3]


def test_unfinished_builder_leaves_no_dataset(tmp_path):
    b = IndexedDatasetBuilder(tmp_path / "p")
    b.add_document([1, 2, 3])
    # not finalized: nothing under the final names
    assert not data_file(tmp_path / "p").exists() and not index_file(tmp_path / "p").exists()
    b.finalize()
    assert len(IndexedDataset(tmp_path / "p")) == 1
