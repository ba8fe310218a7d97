"""Fuzzy deduplication: MinHash + LSH candidates, verified by true Jaccard, union-find components.

Steps (each a map over files, so no step needs more than one shard or partition in memory):
  1. per shard: MinHash signature and LSH band keys of every document (trident.curate.minhash),
     shingled in batches (trident.curate.shingle_batch); (band, key, doc) records go to
     ``partitions`` bucket files chosen by key, and every row's text size to a rows file;
  2. per partition: documents sharing a (band, key) bucket become candidate pairs;
  3. per shard holding candidates: their shingle hashes and keep-priority fields are saved;
     per batch of pairs: true Jaccard of the shingle sets; pairs >= ``threshold`` are verified;
  4. here: union-find over verified pairs; in each component the best document by
     ``trident.curate.dedup_shared.best_first`` is kept, the others dropped (``dropped:duplicate``);
  5. per shard: the kept lines are copied byte for byte (not decoded and encoded again).
Counters: candidates (unique pairs), verified_pairs, components (of >= 2 documents),
shared_buckets, no_shingles (empty texts, never bucketed), hist:cluster_size:<size>.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from trident.curate.dedup_shared import (
    apply_drops_lines,
    best_first,
    concat_structured,
    dataset_salt,
    doc_keys,
    load_partition,
    parse_document,
    priority_array,
    priority_fields,
    save_partitioned,
    shard_documents,
    shard_lines,
    split_keys,
    validate_common,
)
from trident.curate.minhash import MinHasher, bucket_pairs, jaccard, sorted_distinct
from trident.curate.shingle_batch import shingle_hash_batch
from trident.curate.stage import Executor, GlobalStage, register_stage
from trident.text.storage import load_array, location, make_folder, remove_tree, save_array

_BUCKET_DTYPE = [("band", "u2"), ("key", "u8"), ("doc", "u8")]
_SIGNATURE_BATCH = 256  # documents whose shingles are held at once while signing
_VERIFY_BATCH = 50_000  # candidate pairs per verification task


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


def _signature_task(job: dict) -> Counter:
    """Map: LSH band keys of every document of one shard, written to bucket partition files;
    the text size of every row goes to work/rows/s<shard>.npy for the copy at the end."""
    hasher = MinHasher(**job["minhash"])
    shard, counters, chunks, sizes = job["shard"], Counter(), [], []
    batch_rows: list[int] = []
    batch_texts: list[str] = []
    batch_salts: list[int] = []

    def flush() -> None:
        flat, offsets = shingle_hash_batch(batch_texts, hasher.ngram, hasher.unit)
        signed = np.diff(offsets) > 0
        counters["no_shingles"] += int(np.count_nonzero(~signed))  # empty text: left to exact dedup
        keys = hasher.band_keys(hasher.signatures_from_flat(flat, offsets)[signed])
        keys ^= np.array(batch_salts, dtype=np.uint64)[signed][:, None]
        docs = doc_keys(shard, batch_rows)[signed]
        records = np.empty(keys.size, dtype=_BUCKET_DTYPE)
        records["band"] = np.tile(np.arange(hasher.bands), len(docs))
        records["key"] = keys.ravel()
        records["doc"] = np.repeat(docs, hasher.bands)
        chunks.append(records)
        batch_rows.clear(), batch_texts.clear(), batch_salts.clear()

    for row, doc in enumerate(shard_documents(location(job["path"]))):
        counters["signed"] += 1
        sizes.append(doc.nbytes)
        batch_rows.append(row)
        batch_texts.append(doc.text)
        batch_salts.append(dataset_salt(doc, job["scope"]))
        if len(batch_rows) >= _SIGNATURE_BATCH:
            flush()
    if batch_rows:
        flush()
    records = np.concatenate(chunks) if chunks else np.zeros(0, dtype=_BUCKET_DTYPE)
    save_partitioned(records, records["key"] % np.uint64(job["partitions"]), location(job["work"]) / "buckets",
                     "p", f"s{shard:06d}")
    make_folder(location(job["work"]) / "rows")
    save_array(location(job["work"]) / "rows" / f"s{shard:06d}.npy", np.array(sizes, dtype=np.int64))
    return counters


def _bucket_task(job: dict) -> tuple[int, int]:
    """Reduce: candidate pairs of one bucket partition, saved to a file; (buckets, pairs) counts."""
    records = load_partition(location(job["part_dir"]))
    if records is None:
        return 0, 0
    pairs, buckets = bucket_pairs(records["band"], records["key"], records["doc"], job["all_pairs_up_to"])
    save_array(location(job["out"]), pairs)
    return buckets, len(pairs)


def _shingle_task(job: dict) -> None:
    """Save shingle hashes and keep-priority fields of one shard's candidate rows (for verification).

    Only those rows' lines are decoded; the others are skipped as raw bytes.
    """
    hasher = MinHasher(**job["minhash"])
    wanted, shard, path = set(job["rows"]), job["shard"], location(job["path"])
    rows, texts, fields = [], [], []
    for row, (number, data) in enumerate(shard_lines(path)):
        if row in wanted:
            doc = parse_document(path, number, data)
            rows.append(row)
            texts.append(doc.text)
            fields.append(priority_fields(doc, job["priority"], job["priority_field"]))
    keys = doc_keys(shard, rows)
    prio = priority_array(fields, keys)
    flat, offsets = shingle_hash_batch(texts, hasher.ngram, hasher.unit)
    hashes = [sorted_distinct(flat[offsets[i] : offsets[i + 1]]) for i in range(len(rows))]
    offsets = np.cumsum([0] + [h.size for h in hashes]).astype(np.int64)
    flat = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    save_array(_hashes_file(location(job["out"])), flat)  # .npy: no zip checksum over it
    save_array(location(job["out"]), None, keys=keys, offsets=offsets,
             **{name: prio[name] for name in prio.dtype.names if name != "key"})


def _hashes_file(npz: Path) -> Path:
    """Where ``_shingle_task`` puts the flat shingle hashes beside its .npz of keys and offsets."""
    return npz.with_name(npz.name.replace(".npz", ".hashes.npy"))


def _verify_task(job: dict) -> np.ndarray:
    """True Jaccard (float32) of each candidate pair, from the saved shingle hashes."""
    loaded: dict[int, tuple[dict, np.ndarray, np.ndarray]] = {}

    def hashes_of(key: int) -> np.ndarray:
        shard = key >> 32
        if shard not in loaded:
            path = location(job["shingle_dir"]) / f"s{shard:06d}.npz"
            with load_array(path) as data:
                index = {int(k): i for i, k in enumerate(data["keys"])}
                loaded[shard] = (index, data["offsets"], load_array(_hashes_file(path)))
        index, offsets, flat = loaded[shard]
        i = index[key]
        return flat[offsets[i] : offsets[i + 1]]

    pairs = job["pairs"]
    return np.array([jaccard(hashes_of(int(a)), hashes_of(int(b))) for a, b in pairs], dtype=np.float32)


def cluster_size_bin(size: int) -> str:
    """Histogram bin of a duplicate-cluster size: "02".."19", then "20+"."""
    return "20+" if size >= 20 else f"{size:02d}"


@register_stage("fuzzy_dedup")
class FuzzyDedup(GlobalStage):
    """Drop near-duplicates: MinHash + LSH candidates, verified by Jaccard, one kept per component."""

    def __init__(self, num_hashes: int = 100, bands: int = 10, ngram: int = 5, shingle: str = "char",
                 seed: int = 1, threshold: float = 0.7, priority: list[str] | None = None,
                 priority_field: str = "dataset", scope: str = "global", partitions: int = 16,
                 all_pairs_up_to: int = 32) -> None:
        priority = [] if priority is None else priority
        validate_common(priority, priority_field, scope, partitions)
        if not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be a Jaccard value in (0, 1], got {threshold!r}")
        self.minhash = {"num_hashes": num_hashes, "bands": bands, "ngram": ngram, "unit": shingle, "seed": seed}
        MinHasher(**self.minhash)  # validates the MinHash parameters now, not inside a worker
        super().__init__(**self.minhash, threshold=threshold, priority=priority,
                         priority_field=priority_field, scope=scope, partitions=partitions,
                         all_pairs_up_to=all_pairs_up_to)
        self.threshold, self.priority, self.priority_field = float(threshold), priority, priority_field
        self.scope, self.partitions, self.all_pairs_up_to = scope, partitions, all_pairs_up_to

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Dedup ``inputs`` into ``out_dir``; the module docstring lists the steps and counters."""
        out_dir = location(out_dir)
        if getattr(executor, "dedup_on_workers", False):  # Ray: no step gathers pairs on the driver
            from trident.curate.dedup_distributed import run_distributed
            return run_distributed(self, inputs, out_dir, executor)
        work = out_dir / "_work_fuzzy_dedup"
        remove_tree(work)
        pairs = self._candidates(inputs, work, executor)
        similarity = self._verify(inputs, pairs, work, executor)
        verified = pairs[similarity >= self.threshold]
        self.counters["verified_pairs"] += len(verified)
        dropped = self._choose_drops(verified, work / "shingles")
        outputs = apply_drops_lines(self, inputs, out_dir, executor, dropped, "duplicate", work / "rows")
        remove_tree(work)
        return outputs

    def _candidates(self, inputs: list[Path], work: Path, executor: Executor) -> np.ndarray:
        """Sign every shard, then pair documents sharing a bucket; unique (k, 2) doc-key pairs."""
        jobs = [{"shard": i, "path": str(p), "work": str(work), "minhash": self.minhash,
                 "scope": self.scope, "partitions": self.partitions} for i, p in enumerate(inputs)]
        for counters in executor.map(_signature_task, jobs, desc="fuzzy_dedup: minhash"):
            self.counters["no_shingles"] += counters["no_shingles"]
        make_folder(work / "candidates")
        jobs = [{"part_dir": str(work / "buckets" / f"p{p:06d}"), "all_pairs_up_to": self.all_pairs_up_to,
                 "out": str(work / "candidates" / f"p{p:05d}.npy")} for p in range(self.partitions)]
        results = executor.map(_bucket_task, jobs, desc="fuzzy_dedup: buckets")
        self.counters["shared_buckets"] += sum(r[0] for r in results)
        files = sorted((work / "candidates").glob("p*.npy"))
        found = [load_array(f) for f in files] + [np.zeros((0, 2), dtype=np.uint64)]
        pairs = np.unique(np.concatenate(found), axis=0)
        self.counters["candidates"] += len(pairs)
        return pairs

    def _verify(self, inputs: list[Path], pairs: np.ndarray, work: Path, executor: Executor) -> np.ndarray:
        """True Jaccard of every candidate pair (order of ``pairs``)."""
        if len(pairs) == 0:
            return np.zeros(0, dtype=np.float32)
        shingle_dir = work / "shingles"
        make_folder(shingle_dir)
        shards, rows = split_keys(np.unique(pairs))
        jobs = [{"shard": s, "path": str(inputs[s]), "rows": rows[shards == s].tolist(),
                 "minhash": self.minhash, "priority": self.priority, "priority_field": self.priority_field,
                 "out": str(shingle_dir / f"s{s:06d}.npz")} for s in np.unique(shards).tolist()]
        executor.map(_shingle_task, jobs, desc="fuzzy_dedup: shingles")
        jobs = [{"pairs": pairs[i : i + _VERIFY_BATCH], "shingle_dir": str(shingle_dir)}
                for i in range(0, len(pairs), _VERIFY_BATCH)]
        return np.concatenate(executor.map(_verify_task, jobs, desc="fuzzy_dedup: verify"))

    def _choose_drops(self, verified: np.ndarray, shingle_dir: Path) -> np.ndarray:
        """Union-find over verified pairs; every component member but the best one is dropped."""
        forest = UnionFind()
        for a, b in verified.tolist():
            forest.union(a, b)
        components = [c for c in forest.components() if len(c) > 1]
        if not components:
            return np.zeros(0, dtype=np.uint64)
        prio = self._priorities(np.unique(verified), shingle_dir)
        position = {int(k): i for i, k in enumerate(prio["key"])}
        dropped: list[int] = []
        for members in components:
            self.counters["components"] += 1
            self.counters[f"hist:cluster_size:{cluster_size_bin(len(members))}"] += 1
            records = prio[[position[m] for m in members]]
            dropped.extend(records["key"][best_first(records)[1:]].tolist())
        return np.array(dropped, dtype=np.uint64)

    @staticmethod
    def _priorities(keys: np.ndarray, shingle_dir: Path) -> np.ndarray:
        """Keep-priority records of the given documents, read from the shingle files."""
        parts = []
        for shard in np.unique(split_keys(keys)[0]).tolist():
            with load_array(shingle_dir / f"s{shard:06d}.npz") as data:
                rows = [(int(r), float(q), int(n), str(i)) for r, q, n, i in
                        zip(data["rank"], data["quality"], data["length"], data["id"])]
                parts.append(priority_array(rows, data["keys"]))
        merged = concat_structured(parts)
        return merged[np.isin(merged["key"], keys)]
