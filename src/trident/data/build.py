"""From `data:` config to train/valid sample datasets, and from JSONL to indexed datasets.

`build_datasets` is what the trainer calls: it opens each data prefix, splits its documents into
train and valid, packs each split into windows (GPTDataset) and blends several prefixes by weight
(BlendedDataset). Every index array is cached on disk, keyed by its inputs.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from trident.data.blend import BlendedDataset, blending_indices, normalize_weights
from trident.data.indexed import IndexedDataset
from trident.data.prebuild import build_gpt_indices, build_splits, index_workers, open_pool
from trident.data.splits import cache_dir_of, cached_split, source_dataset, split_documents  # noqa: F401 (public here too)
from trident.data.tokenize_jsonl import tokenize_files  # noqa: F401  (public here: trident.data.build.tokenize_files)
from trident.text.storage import is_remote, location

log = logging.getLogger("trident.data")


@dataclass(frozen=True)
class Source:
    weight: float | None  # None: no weight given (weights then follow token counts)
    prefix: Path


def parse_data_paths(paths) -> list[Source]:
    """`data.paths` as Megatron's --data-path: [prefix, ...] or [weight, prefix, weight, prefix, ...].

    Relative prefixes resolve against the current directory; a prefix may name PREFIX.bin/.idx.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths or [])
    if not paths:
        raise ValueError("data.paths is empty: give indexed-dataset prefixes written by `trident tokenize`")

    def as_prefix(item) -> Path:
        text = os.path.expanduser(str(item))
        for suffix in (".bin", ".idx"):
            if text.endswith(suffix):
                text = text[: -len(suffix)]
        return location(text) if is_remote(text) else Path(os.path.abspath(text))

    def as_weight(item):
        if isinstance(item, bool):
            return None
        try:
            return float(item)
        except (TypeError, ValueError):
            return None

    if as_weight(paths[0]) is None:
        bad = [p for p in paths if as_weight(p) is not None]
        if bad:
            raise ValueError(f"data.paths mixes prefixes and weights {bad}: use [prefix, ...] or "
                             f"[weight, prefix, weight, prefix, ...]")
        return [Source(None, as_prefix(p)) for p in paths]
    if len(paths) % 2:
        raise ValueError(f"data.paths has {len(paths)} entries; weighted form needs "
                         f"[weight, prefix, weight, prefix, ...] pairs")
    sources = []
    for weight, prefix in zip(paths[0::2], paths[1::2]):
        w = as_weight(weight)
        if w is None or as_weight(prefix) is not None:
            raise ValueError(f"data.paths: expected a weight then a prefix, got {weight!r}, {prefix!r}")
        if w < 0:
            raise ValueError(f"data.paths: weight {w} for {prefix} is negative")
        sources.append(Source(w, as_prefix(prefix)))
    return sources


class _Empty:
    """A dataset with no samples (e.g. no valid split); the trainer detects it by len() == 0."""

    def __len__(self) -> int:
        return 0

    def __getitem__(self, i):
        raise IndexError("empty dataset (no documents in this split)")


def _build_split(name: str, sources, indexed, splits, data_config, seq_length, num_samples, seed, split_keys,
                 pool=None):
    """One split (train or valid): a GPTDataset, or a blend of one per source that has documents
    (their indices built side by side in `pool`'s processes when given)."""
    usable = [k for k, docs in enumerate(splits) if len(docs) > 0]
    if num_samples == 0 or not usable:
        if num_samples and name == "train":
            raise ValueError("no training documents in any of data.paths")
        if num_samples:
            log.warning("data: no %s documents (data too small for data.valid_fraction=%s); "
                        "the %s set is empty", name, data_config.valid_fraction, name)
        return _Empty()
    if len(usable) < len(sources):
        dropped = [str(sources[k].prefix) for k in range(len(sources)) if k not in usable]
        log.warning("data: %s split has no documents from %s; blending the rest", name, ", ".join(dropped))
    if len(sources) == 1:
        k = usable[0]
        return source_dataset(indexed[k], splits[k], split_keys[k], name, data_config, seq_length, num_samples, seed)
    if any(s.weight is None for s in sources):
        # no weights: each source in proportion to its tokens, as if the files were concatenated
        weights = [float(indexed[k].sizes[splits[k]].sum()) for k in usable]
    else:
        weights = [sources[k].weight for k in usable]
    weights = normalize_weights(weights)
    # the blend order is a function of (weights, num_samples) alone; the prefixes only label the entry
    labels = [str(sources[k].prefix) for k in usable]
    cache_dir = cache_dir_of(data_config, sources[usable[0]].prefix)
    which, local, counts, from_cache = blending_indices(weights, num_samples, cache_dir, labels,
                                                        name=f"blend.{name}")
    if pool is not None:
        build_gpt_indices(pool, data_config, [(sources[k].prefix, name, int(count), seq_length, seed)
                                              for k, count in zip(usable, counts)])
    datasets = [source_dataset(indexed[k], splits[k], split_keys[k], name, data_config, seq_length, int(count), seed)
                for k, count in zip(usable, counts)]
    return BlendedDataset(datasets, which, local, from_cache=from_cache, taken=counts)


def build_datasets(data_config, seq_length: int, train_samples: int, valid_samples: int, seed: int,
                   builder: bool = True):
    """(train, valid) datasets: `ds[i]` is an int64 array of seq_length+1 tokens, fixed by (seed, i).

    `data_config` is trident.config.DataConfig (paths, valid_fraction, split_seed, cache_dir,
    index_workers). The valid set is empty (len 0) when valid_fraction is 0, valid_samples is 0, or
    no source has two or more documents to split. `builder` (rank 0) may build the index cache in
    worker processes (data/prebuild.py); the other ranks only read it.
    """
    sources = parse_data_paths(data_config.paths)
    indexed = [IndexedDataset(s.prefix) for s in sources]
    for source, ds in zip(sources, indexed):
        if len(ds) == 0:
            raise ValueError(f"{source.prefix}: indexed dataset has no documents")
    workers = index_workers(data_config, sum(len(ds) for ds in indexed), len(sources)) if builder else 1
    pool = open_pool(workers)
    try:
        if pool is not None:
            build_splits(pool, data_config, [s.prefix for s in sources])
        return _train_and_valid(sources, indexed, data_config, seq_length, train_samples, valid_samples, seed, pool)
    finally:
        if pool is not None:
            pool.shutdown()


def _train_and_valid(sources, indexed, data_config, seq_length, train_samples, valid_samples, seed, pool):
    train_splits, valid_splits, split_keys = [], [], []
    for source, ds in zip(sources, indexed):
        (train_docs, valid_docs), key = cached_split(len(ds), data_config, cache_dir_of(data_config, source.prefix),
                                                     source.prefix.name)
        train_splits.append(train_docs)
        valid_splits.append(valid_docs)
        split_keys.append(key)
    train = _build_split("train", sources, indexed, train_splits, data_config, seq_length, train_samples, seed,
                         split_keys, pool)
    if data_config.valid_fraction == 0:
        return train, _Empty()  # asked for no validation: nothing to warn about
    valid = _build_split("valid", sources, indexed, valid_splits, data_config, seq_length, valid_samples, seed,
                         split_keys, pool)
    return train, valid
