"""One source's documents split into train and valid, and each part's GPTDataset, with their
index arrays cached on disk (next to the source, or in $TRIDENT_CACHE for a URL): what the serial
build and the index workers both call."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from trident.data.gpt_dataset import GPTDataset
from trident.data.index_cache import load_or_build
from trident.data.indexed import IndexedDataset
from trident.text.storage import cache_root, is_remote, require_local

CACHE_SUBDIR = "index-cache"


def split_documents(num_documents: int, valid_fraction: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, valid) document ids (int64, sorted): round(valid_fraction * n) random documents held out.

    With valid_fraction > 0 at least one document is held out when there are two or more, and
    train always keeps at least one.
    """
    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError(f"data.valid_fraction must be in [0, 1), got {valid_fraction}")
    n_valid = int(round(valid_fraction * num_documents))
    if valid_fraction > 0 and num_documents >= 2:
        n_valid = min(max(n_valid, 1), num_documents - 1)
    else:
        n_valid = min(n_valid, max(num_documents - 1, 0))
    # the permutation rng.permutation(n) draws, shuffled as int32 (same draws for any item size)
    order = np.arange(num_documents, dtype=np.int32 if num_documents < 2**31 else np.int64)
    np.random.default_rng(split_seed).shuffle(order)
    held_out = np.zeros(num_documents, dtype=bool)
    held_out[order[:n_valid]] = True
    del order
    # the sorted ids of each part, by a mask instead of sorting hundreds of millions of ids
    return np.flatnonzero(~held_out).astype(np.int64, copy=False), np.flatnonzero(held_out).astype(np.int64, copy=False)


def cached_split(num_documents: int, data_config, cache_dir: Path, label: str):
    """split_documents through the index cache: ((train, valid) memory-mapped, the key naming them).

    The key is the split's inputs; it names the documents of GPTDataset's cache entries too.
    """
    key = {"num_documents": num_documents, "valid_fraction": data_config.valid_fraction,
           "split_seed": data_config.split_seed}
    build = lambda: dict(zip(("train", "valid"), split_documents(num_documents, data_config.valid_fraction,  # noqa: E731
                                                                 data_config.split_seed)))
    arrays, _ = load_or_build(cache_dir, f"{label}.split", key, ("train", "valid"), build)
    return (arrays["train"], arrays["valid"]), key


def cache_dir_of(data_config, prefix: Path) -> Path:
    if getattr(data_config, "cache_dir", ""):
        require_local(data_config.cache_dir, "data.cache_dir", "the index arrays are memory-mapped from a local "
                                                              "folder; leave it empty to cache a URL's in $TRIDENT_CACHE")
        return Path(os.path.abspath(os.path.expanduser(data_config.cache_dir)))
    if is_remote(prefix):  # index arrays are memory-mapped: they live on a local disk
        return cache_root() / CACHE_SUBDIR / hashlib.sha256(str(prefix.parent).encode()).hexdigest()[:16]
    return prefix.parent / CACHE_SUBDIR


def source_dataset(indexed: IndexedDataset, documents, split_key: dict, part: str, data_config, seq_length: int,
                   num_samples: int, seed: int) -> GPTDataset:
    """One source's part (train or valid) as a GPTDataset, its indices cached next to the source."""
    return GPTDataset(indexed, documents, seq_length, num_samples, seed,
                      cache_dir=cache_dir_of(data_config, indexed.prefix), name=part,
                      documents_key={**split_key, "part": part})
