"""What exact and fuzzy dedup share: which document of a duplicate group is kept, and the uint64
key naming a document (shard, row).

Which document of a duplicate group survives (``best_first``), in order:
  1. rank of ``meta[priority_field]`` (default "dataset") in the ``priority`` list; values not in
     the list rank after all listed ones;
  2. higher ``meta["quality_score"]`` (documents without one after those with one);
  3. longer text (characters);
  4. smaller document id, then input order, so the choice is deterministic.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import xxhash

from trident.curate.document import Document

_ROW_BITS = np.uint64(32)
_ROW_MASK = np.uint64(0xFFFFFFFF)
SCOPES = ("global", "dataset")


# ---- keep-priority ---------------------------------------------------------------------------

def priority_fields(doc: Document, priority: list[str], priority_field: str) -> tuple[int, float, int, str]:
    """(rank, quality or NaN, length, id) of a document: the inputs of ``best_first``."""
    value = doc.meta.get(priority_field)
    rank = priority.index(value) if value in priority else len(priority)
    quality = doc.meta.get("quality_score")
    quality = float(quality) if isinstance(quality, (int, float)) and not isinstance(quality, bool) else math.nan
    return rank, quality, len(doc.text), doc.id


def priority_array(rows: list[tuple[int, float, int, str]], keys: np.ndarray) -> np.ndarray:
    """Structured array (rank, quality, length, id, key) from ``priority_fields`` rows and doc keys."""
    rank, quality, length, ids = zip(*rows) if rows else ((), (), (), ())
    return priority_columns(rank, quality, length, np.array(ids, dtype=str), keys)


def priority_columns(rank, quality, length, ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The same structured array from its columns (as a shard table stores them: no Python loop)."""
    dtype = [("rank", "i4"), ("quality", "f8"), ("length", "i8"), ("id", f"U{max(ids.dtype.itemsize // 4, 1)}"),
             ("key", "u8")]
    out = np.empty(len(ids), dtype=dtype)
    out["rank"], out["quality"], out["length"], out["id"], out["key"] = rank, quality, length, ids, keys
    return out


def stored_priorities(table, member: np.ndarray) -> np.ndarray:
    """Priority records of the rows ``member`` selects from a saved shard table (keys, rank, quality, length, id)."""
    return priority_columns(table["rank"][member], table["quality"][member], table["length"][member],
                            np.asarray(table["id"][member], dtype=str), table["keys"][member])


def best_first(records: np.ndarray) -> np.ndarray:
    """Indices of ``records`` (a priority array) ordered from the document to keep to the last."""
    quality_key = np.where(np.isnan(records["quality"]), np.inf, -records["quality"])
    return np.lexsort((records["key"], records["id"], -records["length"], quality_key, records["rank"]))


def doc_key(shard: int, row: int) -> int:
    """One uint64 naming a document: shard index in the high 32 bits, row in the low 32."""
    return (shard << 32) | row


def doc_keys(shard: int, rows) -> np.ndarray:
    """``doc_key`` of many rows of one shard at once (uint64)."""
    return (np.uint64(shard) << _ROW_BITS) | np.asarray(rows, dtype=np.uint64)


def split_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shard indices, rows) of an array of ``doc_key`` values."""
    keys = np.asarray(keys, dtype=np.uint64)
    return (keys >> _ROW_BITS).astype(np.int64), (keys & _ROW_MASK).astype(np.int64)


def dataset_salt(doc: Document, scope: str) -> int:
    """0 in global scope; a hash of meta["dataset"] in dataset scope (keeps datasets apart)."""
    if scope == "global":
        return 0
    return xxhash.xxh3_64_intdigest(str(doc.meta.get("dataset", "")).encode("utf-8"))

def validate_common(priority: Any, priority_field: Any, scope: Any, partitions: Any) -> None:
    """Raise ValueError naming the parameter when a shared dedup parameter is malformed."""
    if not isinstance(priority, list) or not all(isinstance(p, str) for p in priority):
        raise ValueError(f"priority must be a list of strings, got {priority!r}")
    if not isinstance(priority_field, str) or not priority_field:
        raise ValueError(f"priority_field must be a meta key name, got {priority_field!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    if not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions must be an integer >= 1, got {partitions!r}")
