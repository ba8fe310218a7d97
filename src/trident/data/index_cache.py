"""On-disk cache of numpy index arrays, keyed by a hash of everything they were built from.

A cache entry is NAME.KEY.ARRAY.npy files plus NAME.KEY.json describing the inputs; the .json is
written last, so an entry without it is incomplete and gets rebuilt. Files are written under
temporary names and renamed, so concurrent builders (several ranks) never read half a file.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np


CACHE_VERSION = 1  # bump when the index-building algorithms change


def array_digest(array: np.ndarray) -> str:
    array = np.ascontiguousarray(array)
    return hashlib.sha256(array.dtype.str.encode() + array.tobytes()).hexdigest()[:16]


def cache_key(inputs: dict) -> str:
    text = json.dumps({"version": CACHE_VERSION, **inputs}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _paths(cache_dir: Path, name: str, key: str, arrays: tuple[str, ...]):
    stem = f"{name}.{key}"
    return cache_dir / f"{stem}.json", {a: cache_dir / f"{stem}.{a}.npy" for a in arrays}


def load_or_build(cache_dir, name: str, inputs: dict, arrays: tuple[str, ...],
                  build: Callable[[], dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], bool]:
    """The cached arrays for `inputs`, memory-mapped read-only, building and saving them on a miss.

    Returns (arrays, from_cache). Either way the arrays are maps of the cache files, not copies:
    a freshly built array is dropped once saved, so a process holds one entry in memory at a time.
    """
    cache_dir = Path(cache_dir)
    key = cache_key(inputs)
    meta_path, array_paths = _paths(cache_dir, name, key, arrays)

    def mapped():
        return {a: np.load(p, mmap_mode="r", allow_pickle=False) for a, p in array_paths.items()}

    if meta_path.is_file() and all(p.is_file() for p in array_paths.values()):
        return mapped(), True
    built = build()
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        suffix = f".tmp{os.getpid()}"
        for a, path in array_paths.items():
            tmp = path.with_name(path.name + suffix)
            with open(tmp, "wb") as f:
                np.save(f, np.ascontiguousarray(built[a]), allow_pickle=False)
            os.replace(tmp, path)
        tmp = meta_path.with_name(meta_path.name + suffix)
        tmp.write_text(json.dumps({"name": name, "key": key, "inputs": inputs}, indent=1, sort_keys=True))
        os.replace(tmp, meta_path)
    except OSError as err:
        raise OSError(f"cannot write index cache in {cache_dir} ({err}); set data.cache_dir to a "
                      f"writable directory") from err
    del built
    return mapped(), False


def smallest_int(array: np.ndarray) -> np.ndarray:
    """int32 when every value fits (halves cache size and memory), else int64."""
    array = np.asarray(array)
    if array.size == 0 or (array.min() >= np.iinfo(np.int32).min and array.max() <= np.iinfo(np.int32).max):
        return array.astype(np.int32, copy=False)
    return array.astype(np.int64, copy=False)
