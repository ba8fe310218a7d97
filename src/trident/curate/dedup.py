"""Exact deduplication, plus what exact and fuzzy dedup share: keep-priority, union-find, filtering.

The fuzzy (MinHash) stage is in trident.curate.fuzzy_dedup; importing this module registers both.

Both dedup stages are map/reduce jobs over files, so no step holds more than one shard or one
hash partition in memory:
  1. per shard (parallel): hash each document, write the hashes into `partitions` files by hash;
  2. per partition (parallel): group equal hashes, choose which documents to drop;
  3. per shard (parallel): copy the shard without the dropped rows.

Which document of a duplicate group survives (``best_first``), in order:
  1. rank of ``meta[priority_field]`` (default "dataset") in the ``priority`` list; values not in
     the list rank after all listed ones;
  2. higher ``meta["quality_score"]`` (documents without one after those with one);
  3. longer text (characters);
  4. smaller document id, then input order, so the choice is deterministic.

``scope: global`` deduplicates across datasets; ``scope: dataset`` only within each
``meta["dataset"]`` (documents of different datasets are never duplicates of each other).

Exact-dedup key: xxh3_128 of the text lower-cased, whitespace runs collapsed to one space and
stripped (``normalize_for_exact``), so copies that differ only in case or spacing are duplicates.
"""
from __future__ import annotations

import math
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from trident.curate.document import CurateError, Document
from trident.curate.shards import read_shard, write_shard
from trident.curate.stage import Executor, GlobalStage, register_stage

_WHITESPACE = re.compile(r"\s+")
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
    width = max([len(r[3]) for r in rows] + [1])
    dtype = [("rank", "i4"), ("quality", "f8"), ("length", "i8"), ("id", f"U{width}"), ("key", "u8")]
    out = np.empty(len(rows), dtype=dtype)
    if rows:
        rank, quality, length, ids = zip(*rows)
        out["rank"], out["quality"], out["length"], out["id"] = rank, quality, length, ids
    out["key"] = keys
    return out


def best_first(records: np.ndarray) -> np.ndarray:
    """Indices of ``records`` (a priority array) ordered from the document to keep to the last."""
    quality_key = np.where(np.isnan(records["quality"]), np.inf, -records["quality"])
    return np.lexsort((records["key"], records["id"], -records["length"], quality_key, records["rank"]))


def concat_structured(arrays: list[np.ndarray]) -> np.ndarray:
    """Concatenate structured arrays whose string fields may differ in width."""
    names = arrays[0].dtype.names
    dtype = []
    for name in names:
        kinds = [a.dtype[name] for a in arrays]
        dtype.append((name, max(kinds, key=lambda d: d.itemsize) if kinds[0].kind == "U" else kinds[0]))
    return np.concatenate([a.astype(dtype) for a in arrays])


def doc_key(shard: int, row: int) -> int:
    """One uint64 naming a document: shard index in the high 32 bits, row in the low 32."""
    return (shard << 32) | row


def split_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shard indices, rows) of an array of ``doc_key`` values."""
    keys = np.asarray(keys, dtype=np.uint64)
    return (keys >> _ROW_BITS).astype(np.int64), (keys & _ROW_MASK).astype(np.int64)


def dataset_salt(doc: Document, scope: str) -> int:
    """0 in global scope; a hash of meta["dataset"] in dataset scope (keeps datasets apart)."""
    if scope == "global":
        return 0
    return xxhash.xxh3_64_intdigest(str(doc.meta.get("dataset", "")).encode("utf-8"))


# ---- union-find ------------------------------------------------------------------------------

class UnionFind:
    """Disjoint sets over arbitrary hashable items (path halving + union by size)."""

    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}
        self.size: dict[Any, int] = {}

    def find(self, item: Any) -> Any:
        """The representative of ``item``'s set (adds ``item`` as a singleton if new)."""
        parent = self.parent
        if item not in parent:
            parent[item], self.size[item] = item, 1
            return item
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(self, a: Any, b: Any) -> None:
        """Merge the sets of ``a`` and ``b``."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]

    def components(self) -> list[list[Any]]:
        """Every set with its members in insertion order; sets ordered by first member."""
        groups: dict[Any, list[Any]] = {}
        for item in self.parent:
            groups.setdefault(self.find(item), []).append(item)
        return list(groups.values())


# ---- shared map/reduce plumbing --------------------------------------------------------------

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


def output_paths(inputs: list[Path], out_dir: Path) -> list[Path]:
    """One output shard per input, same file name (prefixed by its index if names collide)."""
    names = [Path(p).name for p in inputs]
    clash = len(set(names)) != len(names)
    return [out_dir / (f"{i:05d}-{n}" if clash else n) for i, n in enumerate(names)]


def save_partitioned(records: np.ndarray, part_of: np.ndarray, work: Path, shard: int) -> None:
    """Write ``records`` to work/p<part>/s<shard>.npy, one file per partition present."""
    for part in np.unique(part_of):
        target = work / f"p{int(part):05d}"
        target.mkdir(parents=True, exist_ok=True)
        np.save(target / f"s{shard:06d}.npy", records[part_of == part], allow_pickle=False)


def load_partition(part_dir: Path) -> np.ndarray | None:
    """All records of one partition folder concatenated, or None when it holds none."""
    files = sorted(part_dir.glob("s*.npy"))
    if not files:
        return None
    return concat_structured([np.load(f, allow_pickle=False) for f in files])


def filter_shard_task(job: tuple[str, str, list[int], str]) -> Counter:
    """Copy shard ``src`` to ``dst`` without the listed rows (counted as ``dropped:<reason>``)."""
    src, dst, drop_rows, reason = job
    drop = set(drop_rows)
    counters: Counter = Counter()

    def kept():
        for row, doc in enumerate(read_shard(Path(src))):
            counters["in"] += 1
            counters["bytes_in"] += doc.nbytes
            if row in drop:
                counters[f"dropped:{reason}"] += 1
                continue
            counters["out"] += 1
            counters["bytes_out"] += doc.nbytes
            yield doc

    write_shard(Path(dst), kept())
    if counters[f"dropped:{reason}"] != len(drop):
        raise CurateError(f"{src}: {len(drop)} rows marked {reason}, but {counters[f'dropped:{reason}']} found")
    return counters


def drop_lists(dropped: np.ndarray, n_shards: int) -> list[list[int]]:
    """Sorted row lists per shard from an array of ``doc_key`` values."""
    shards, rows = split_keys(dropped)
    out: list[list[int]] = [[] for _ in range(n_shards)]
    for s, r in zip(shards.tolist(), rows.tolist()):
        out[s].append(r)
    return [sorted(rows) for rows in out]


def apply_drops(stage: GlobalStage, inputs: list[Path], out_dir: Path, executor: Executor,
                dropped: np.ndarray, reason: str) -> list[Path]:
    """Write the filtered shards and add their counters to ``stage.counters``."""
    outputs = output_paths(inputs, out_dir)
    rows = drop_lists(dropped, len(inputs))
    jobs = [(str(i), str(o), r, reason) for i, o, r in zip(inputs, outputs, rows)]
    for counters in executor.map(filter_shard_task, jobs, desc=f"{stage.name}: write"):
        stage.counters.update(counters)
    return outputs


# ---- exact dedup -----------------------------------------------------------------------------

def normalize_for_exact(text: str) -> str:
    """The text exact dedup compares: lower-cased, whitespace runs -> one space, stripped."""
    return _WHITESPACE.sub(" ", text.lower()).strip()


def exact_hash(text: str, salt: int = 0) -> tuple[int, int]:
    """(high, low) 64-bit halves of xxh3_128 of the normalised text, seeded with ``salt``."""
    value = xxhash.xxh3_128_intdigest(normalize_for_exact(text).encode("utf-8"), seed=salt)
    return value >> 64, value & 0xFFFFFFFFFFFFFFFF


def _exact_hash_task(job: dict) -> int:
    """Map step: hash every document of one shard into partition files; returns documents seen."""
    shard, rows, hashes = job["shard"], [], []
    for row, doc in enumerate(read_shard(Path(job["path"]))):
        hashes.append(exact_hash(doc.text, dataset_salt(doc, job["scope"])))
        rows.append(priority_fields(doc, job["priority"], job["priority_field"]))
    keys = np.array([doc_key(shard, r) for r in range(len(rows))], dtype=np.uint64)
    base = priority_array(rows, keys)
    records = np.empty(len(rows), dtype=[("hi", "u8"), ("lo", "u8")] + base.dtype.descr)
    for name in base.dtype.names:
        records[name] = base[name]
    if rows:
        records["hi"], records["lo"] = zip(*hashes)
    save_partitioned(records, records["lo"] % np.uint64(job["partitions"]), Path(job["work"]), shard)
    return len(rows)


def _exact_group_task(part_dir: str) -> tuple[np.ndarray, int]:
    """Reduce step: doc keys to drop in one partition, and how many duplicate groups it had."""
    records = load_partition(Path(part_dir))
    if records is None:
        return np.zeros(0, dtype=np.uint64), 0
    quality_key = np.where(np.isnan(records["quality"]), np.inf, -records["quality"])
    order = np.lexsort((records["key"], records["id"], -records["length"], quality_key,
                        records["rank"], records["lo"], records["hi"]))
    records = records[order]
    same = (records["hi"][1:] == records["hi"][:-1]) & (records["lo"][1:] == records["lo"][:-1])
    first_of_group = np.r_[True, ~same]
    groups = int(np.count_nonzero(first_of_group[:-1] & same)) if len(records) > 1 else 0
    return records["key"][~first_of_group], groups


@register_stage("exact_dedup")
class ExactDedup(GlobalStage):
    """Drop documents whose normalised text equals a higher-priority document's (``dropped:duplicate``)."""

    def __init__(self, priority: list[str] | None = None, priority_field: str = "dataset",
                 scope: str = "global", partitions: int = 16) -> None:
        priority = [] if priority is None else priority
        validate_common(priority, priority_field, scope, partitions)
        super().__init__(priority=priority, priority_field=priority_field, scope=scope, partitions=partitions)
        self.priority, self.priority_field = priority, priority_field
        self.scope, self.partitions = scope, partitions

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Dedup ``inputs`` into ``out_dir``; counters: in/out/dropped:duplicate, duplicate_groups."""
        out_dir = Path(out_dir)
        work = out_dir / "_work_exact_dedup"
        shutil.rmtree(work, ignore_errors=True)
        jobs = [{"shard": i, "path": str(p), "work": str(work), "partitions": self.partitions,
                 "scope": self.scope, "priority": self.priority, "priority_field": self.priority_field}
                for i, p in enumerate(inputs)]
        executor.map(_exact_hash_task, jobs, desc="exact_dedup: hash")
        parts = [str(work / f"p{p:05d}") for p in range(self.partitions)]
        results = executor.map(_exact_group_task, parts, desc="exact_dedup: group")
        dropped = np.concatenate([r[0] for r in results] + [np.zeros(0, dtype=np.uint64)])
        self.counters["duplicate_groups"] += sum(r[1] for r in results)
        outputs = apply_drops(self, inputs, out_dir, executor, dropped, "duplicate")
        shutil.rmtree(work, ignore_errors=True)
        return outputs


# The fuzzy stage lives in its own file; importing it here registers "fuzzy_dedup" too.
import trident.curate.fuzzy_dedup  # noqa: E402,F401  (after the definitions it imports)
