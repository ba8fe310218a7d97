"""Rank 0's index cache built by one process per source equals the one-process build, array by array."""
import os

import numpy as np
import pytest

from trident.config import DataConfig
from trident.data.build import build_datasets
from trident.data.indexed import IndexedDatasetBuilder
from trident.data.prebuild import index_workers


def write_source(prefix, base, num_docs):
    builder = IndexedDatasetBuilder(prefix, np.int32)
    for d in range(num_docs):
        builder.add_document(base + d * 100 + np.arange(1, 20 + d % 13))
    builder.finalize()


@pytest.mark.timeout(120)
def test_workers_build_the_same_indices_and_the_parent_reads_them_from_the_cache(tmp_path):
    for k, name in enumerate("abc"):
        write_source(tmp_path / name, base=k * 1_000_000, num_docs=30 + 7 * k)
    paths = [0.2, str(tmp_path / "a"), 0.5, str(tmp_path / "b"), 0.3, str(tmp_path / "c")]
    built = {}
    for workers in (1, 3):
        config = DataConfig(paths=paths, valid_fraction=0.1, cache_dir=str(tmp_path / f"cache{workers}"),
                            index_workers=workers)
        train, valid = build_datasets(config, 16, train_samples=500, valid_samples=50, seed=3)
        built[workers] = (train, valid)
        # with workers, every GPTDataset entry was written by a worker: the parent only mapped it
        assert all(d.from_cache for d in train.datasets) == (workers > 1)
    for one, many in zip(built[1], built[3]):
        for a, b in zip(one.datasets, many.datasets):
            for name in ("doc_idx", "sample_idx", "shuffle_idx"):
                assert np.array_equal(getattr(a, name), getattr(b, name)) and getattr(a, name).dtype == getattr(b, name).dtype
        assert all(np.array_equal(one[i], many[i]) for i in range(len(one)))


def test_workers_are_used_only_when_asked_or_the_data_is_big():
    assert index_workers(DataConfig(index_workers=4), num_documents=10, num_sources=3) == 3
    assert index_workers(DataConfig(), num_documents=1000, num_sources=15) == 1
    assert index_workers(DataConfig(), num_documents=300_000_000, num_sources=15) == min(15, len(os.sched_getaffinity(0)))
