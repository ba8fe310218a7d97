"""Rank 0 builds the index cache with one process per source, so the build scales with cores.

Each source's split and its train/valid GPTDataset indices depend on that source alone (plus the
blend's per-source sample count), so workers build them side by side and write the cache entries;
`build_datasets` then maps every entry from the cache as a reading rank does. The arrays are the
ones one process builds (same functions, same seeds). Workers start with "spawn": rank 0 may
already hold a process group and threads, which a fork would copy.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from trident.data.indexed import IndexedDataset
from trident.data.splits import cache_dir_of, cached_split, source_dataset

AUTO_MIN_DOCUMENTS = 1_000_000  # below this a serial build takes seconds: starting workers costs more


def index_workers(data_config, num_documents: int, num_sources: int) -> int:
    """How many processes build the indices: data.index_workers, or (0: auto) one per source up
    to the cores this process may use, when the data is big enough to gain from it."""
    asked = int(getattr(data_config, "index_workers", 0))
    if asked:
        return min(asked, num_sources)
    if num_documents < AUTO_MIN_DOCUMENTS:
        return 1
    return max(1, min(num_sources, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))


def open_pool(workers: int) -> ProcessPoolExecutor | None:
    if workers <= 1:
        return None
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def build_splits(pool: ProcessPoolExecutor, data_config, prefixes: list[Path]) -> None:
    """Write every source's split entry (train/valid document ids) into the cache."""
    list(pool.map(_split_task, [(data_config, prefix) for prefix in prefixes]))


def build_gpt_indices(pool: ProcessPoolExecutor, data_config, tasks: list[tuple]) -> None:
    """Write the GPTDataset entries of (prefix, part, num_samples, seq_length, seed) into the cache."""
    list(pool.map(_gpt_task, [(data_config, *task) for task in tasks]))


def _split_task(args) -> None:
    data_config, prefix = args
    cached_split(len(IndexedDataset(prefix)), data_config, cache_dir_of(data_config, prefix), prefix.name)


def _gpt_task(args) -> None:
    data_config, prefix, part, num_samples, seq_length, seed = args
    indexed = IndexedDataset(prefix)
    (train, valid), key = cached_split(len(indexed), data_config, cache_dir_of(data_config, prefix), prefix.name)
    source_dataset(indexed, train if part == "train" else valid, key, part, data_config, seq_length, num_samples, seed)
