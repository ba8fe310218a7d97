"""What exact and fuzzy dedup share: which document of a duplicate group is kept, and the uint64
key naming a document (shard, row).

Which document of a duplicate group survives (``best_first``): the order of the stage's ``keep``
list (KEEP_KEYS, all four by default), then the smaller document id, then input order, so the
choice is deterministic:
  language: higher ``meta["language_share"]`` (the share of the page's letters in the wanted
     languages, set by langid; to two decimals; documents without one after those with one), so an
     English page is kept over its partly translated copy;
  priority: rank of ``meta[priority_field]`` (default "dataset") in the ``priority`` list; values
     not in the list rank after all listed ones;
  quality: higher ``meta["quality_score"]`` (documents without one after those with one);
  length: longer text (characters).
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
KEEP_KEYS = ("language", "priority", "quality", "length")  # the default keep order, too


# ---- keep-priority ---------------------------------------------------------------------------

def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def priority_fields(doc: Document, priority: list[str], priority_field: str) -> tuple:
    """(language share or NaN, rank, quality or NaN, length, id, language) of a document: the
    inputs of ``best_first``, and the language a duplicate's kept copy is counted under."""
    value = doc.meta.get(priority_field)
    rank = priority.index(value) if value in priority else len(priority)
    share = round(_number(doc.meta.get("language_share")), 2)  # shares a hundredth apart are equal
    return (share, rank, _number(doc.meta.get("quality_score")), len(doc.text), doc.id,
            str(doc.meta.get("language") or ""))


def priority_array(rows: list[tuple], keys: np.ndarray) -> np.ndarray:
    """Structured array (share, rank, quality, length, id, language, key) from ``priority_fields`` rows."""
    columns = list(zip(*rows)) if rows else [()] * 6
    return priority_columns(*columns[:4], np.array(columns[4], dtype=str), np.array(columns[5], dtype=str), keys)


def priority_columns(share, rank, quality, length, ids: np.ndarray, languages: np.ndarray,
                     keys: np.ndarray) -> np.ndarray:
    """The same structured array from its columns (as a shard table stores them: no Python loop)."""
    width = lambda strings: f"U{max(strings.dtype.itemsize // 4, 1)}"
    dtype = [("share", "f8"), ("rank", "i4"), ("quality", "f8"), ("length", "i8"), ("id", width(ids)),
             ("language", width(languages)), ("key", "u8")]
    out = np.empty(len(ids), dtype=dtype)
    out["share"], out["rank"], out["quality"], out["length"] = share, rank, quality, length
    out["id"], out["language"], out["key"] = ids, languages, keys
    return out


def stored_priorities(table, member: np.ndarray) -> np.ndarray:
    """Priority records of the rows ``member`` selects from a saved shard table (keys, share, rank, ...)."""
    return priority_columns(table["share"][member], table["rank"][member], table["quality"][member],
                            table["length"][member], np.asarray(table["id"][member], dtype=str),
                            np.asarray(table["language"][member], dtype=str), table["keys"][member])


def keep_sort_keys(records: np.ndarray, keep: list[str] | tuple = KEEP_KEYS) -> list[np.ndarray]:
    """The columns ``best_first`` sorts by, most significant first: ``keep``'s, then id, then key."""
    later_if_nan = lambda values: np.where(np.isnan(values), np.inf, -values)  # higher first, NaN last
    columns = {"language": lambda: later_if_nan(records["share"]), "priority": lambda: records["rank"],
               "quality": lambda: later_if_nan(records["quality"]), "length": lambda: -records["length"]}
    return [columns[name]() for name in keep] + [records["id"], records["key"]]


def best_first(records: np.ndarray, keep: list[str] | tuple = KEEP_KEYS) -> np.ndarray:
    """Indices of ``records`` (a priority array) ordered from the document to keep to the last."""
    return np.lexsort(keep_sort_keys(records, keep)[::-1])


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


def validate_common(priority: Any, priority_field: Any, scope: Any, partitions: Any, keep: Any = KEEP_KEYS) -> None:
    """Raise ValueError naming the parameter when a shared dedup parameter is malformed."""
    if (not isinstance(keep, (list, tuple)) or not all(k in KEEP_KEYS for k in keep)
            or len(set(keep)) != len(keep)):
        raise ValueError(f"keep must be a list of distinct names from {list(KEEP_KEYS)}, got {keep!r}")
    if not isinstance(priority, list) or not all(isinstance(p, str) for p in priority):
        raise ValueError(f"priority must be a list of strings, got {priority!r}")
    if not isinstance(priority_field, str) or not priority_field:
        raise ValueError(f"priority_field must be a meta key name, got {priority_field!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    if not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions must be an integer >= 1, got {partitions!r}")
