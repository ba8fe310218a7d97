"""Fuzzy deduplication: MinHash + LSH candidates, verified by true Jaccard, connected components.

Steps (each a map over files, so no step needs more than one shard or partition in memory):
  1. per shard: every document normalised and shingle-hashed in compiled code
     (trident.curate.dedup.kernels.loops, the rules of trident.curate.dedup.minhash), its MinHash signature and
     LSH band keys; (band, key, doc) records go to one file a shard, sorted into ``partitions`` by
     key; the normalised UTF-8 text, keep-priority fields and text sizes are kept for steps 3 to 5;
  2. per partition: documents sharing a (band, key) bucket become candidate pairs (the partition's
     rows of every shard's file; the pairs come back to this process, which makes them unique);
  3. per batch of pairs: a pair whose MinHash estimate is below the threshold by more than
     ``screen_margin`` (default 0.25; null: none) is not compared; the others' true Jaccard
     of their shingle sets, from shingle keys made
     again from their kept normalised text (only candidates' bytes are read: a byte per text byte
     on disk, where keeping every document's hashes wrote eight; a key is cheaper than a hash,
     see kernels/loops.py); pairs >= ``threshold`` are verified (a pair stops being compared once
     the rest of its shingles cannot lift it to the threshold: most candidates of long documents);
  4. here: connected components of the verified pairs (vectorised); in each component the best document by
     ``trident.curate.dedup.keys.best_first`` (the stage's ``keep`` order) is kept, the others dropped
     (``dropped:duplicate``), each drop record naming the kept copy and the Jaccard of the two (from
     step 3 when they were a candidate pair, else computed for that pair alone);
  5. per shard: the kept lines are copied byte for byte (not decoded and encoded again).
Counters: candidates (unique pairs), screened_pairs (not compared: step 3), verified_pairs,
components (of >= 2 documents),
shared_buckets, no_shingles (empty texts, never bucketed), hist:cluster_size:<size>,
duplicates_of_language:<code> (duplicates dropped, by their kept copy's meta "language").
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from trident.curate.dedup.components import cluster_size_bin, component_labels, sorted_distinct, unique_pairs
from trident.curate.dedup.drop_rows import KEPT_LANGUAGE, apply_drops_lines, drop_records
from trident.curate.dedup.fuzzy_distributed import run_distributed
from trident.curate.dedup.keys import (KEEP_KEYS, best_first, dataset_salt, doc_keys, priority_array, priority_fields,
                                       split_keys, stored_priorities, validate_common)
from trident.curate.dedup.minhash import BUCKET_DTYPE, MinHasher, bucket_pairs
from trident.curate.dedup.partitions import concat_structured
from trident.curate.read.read_task import read_raw_documents
from trident.curate.read.shard_lines import shard_documents
from trident.curate.stage import Executor, GlobalStage, register_stage
from trident.text.storage import (is_remote, load_array, location, make_folder, open_read, open_write, remove_tree,
                                  save_array)

_SIGNATURE_CHARS = 1 << 20  # characters of text normalised and signed at once
_VERIFY_BATCH = 50_000  # candidate pairs per verification task
_VERIFY_BYTES = 1 << 21  # normalised text bytes a verification task hashes at once (<= 1 hash, 8 bytes, each)


def _signature_task(job: dict) -> dict:
    """Map: LSH band keys of every document of one shard, written to work/buckets/s<shard>.npy sorted
    by partition; returns {"no_shingles": n, "bounds": where each partition's rows start, then the
    end}. Kept for the later steps: every document's normalised UTF-8 text (work/shingles/s<shard>.text)
    with its keep-priority fields (s<shard>.npz), and every row's text size (work/rows). With a "read"
    task the shard is read from the raw input, and written, in the same pass."""
    from trident.curate.dedup.kernels.loops import band_keys, normalised_bytes, shingle_signatures, utf8_texts

    hasher = MinHasher(**job["minhash"])
    shard, work, counters = job["shard"], location(job["work"]), Counter()
    chunks, sizes, fields, lengths, batch, salts, kept_signatures = [], [], [], [], [], [], []
    make_folder(work / "shingles")

    def flush(store) -> None:
        utf8 = utf8_texts(batch)
        sizes.append(np.diff(utf8[1]))  # each text's UTF-8 bytes: Document.nbytes, from the one encoding
        buf, bounds = normalised_bytes(batch, utf8)
        store.write(memoryview(buf))  # kept for verification: a byte per byte, hashed again only for candidates
        lengths.append(np.diff(bounds))
        signed = np.diff(bounds) > 0  # a normalised text of a byte or more has a shingle
        counters["no_shingles"] += int(np.count_nonzero(~signed))  # empty text: left to exact dedup
        signatures = shingle_signatures(buf, bounds, hasher.multipliers, hasher.ngram, hasher.unit)
        kept_signatures.append(signatures)  # step 3 screens candidate pairs by them
        keys = band_keys(hasher, signatures[signed])
        keys ^= np.array(salts, dtype=np.uint64)[signed][:, None]
        docs = doc_keys(shard, np.arange(len(fields) - len(batch), len(fields)))[signed]
        records = np.empty(keys.size, dtype=BUCKET_DTYPE)
        records["band"] = np.tile(np.arange(hasher.bands), len(docs))
        records["key"] = keys.ravel()
        records["doc"] = np.repeat(docs, hasher.bands)
        chunks.append(records)
        batch.clear(), salts.clear()

    with open_write(_text_file(work / "shingles" / f"s{shard:06d}.npz")) as store:
        held = 0
        for doc in read_raw_documents(job["read"]) if job.get("read") else shard_documents(location(job["path"])):
            fields.append(priority_fields(doc, job["priority"], job["priority_field"]))
            batch.append(doc.text)
            salts.append(dataset_salt(doc, job["scope"]))
            held += len(doc.text)
            if held >= _SIGNATURE_CHARS:
                flush(store)
                held = 0
        if batch:
            flush(store)
    _save_shard_tables(work, shard, fields, lengths, sizes)
    make_folder(work / "signatures")
    save_array(work / "signatures" / f"s{shard:06d}.npy",
               np.concatenate(kept_signatures) if kept_signatures else np.zeros((0, hasher.num_hashes), np.uint32))
    records = np.concatenate(chunks) if chunks else np.zeros(0, dtype=BUCKET_DTYPE)
    bounds = _save_buckets(records, job["partitions"], work / "buckets" / f"s{shard:06d}.npy")
    return {"no_shingles": counters["no_shingles"], "bounds": bounds}


def _save_buckets(records: np.ndarray, partitions: int, path: Path) -> list[int]:
    """One file of a shard's bucket records, sorted by partition (key mod partitions; in their order
    within one); returns the row where each partition starts, then the end. One file a shard, not a
    file a partition: a run's folders and files do not grow with the partitions."""
    part = (records["key"] % np.uint64(partitions)).astype(np.uint16 if partitions <= 1 << 16 else np.int64)
    make_folder(path.parent)
    save_array(path, np.take(records, np.argsort(part, kind="stable")))  # 16-bit keys: a radix sort
    return np.r_[0, np.cumsum(np.bincount(part, minlength=partitions))].tolist()


def _load_rows(path: Path, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of an array np.save wrote, reading only their bytes (a file or an object)."""
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    with open_read(path) as handle:
        shape, _, dtype = readers[np.lib.format.read_magic(handle)](handle)
        handle.seek(handle.tell() + start * dtype.itemsize)
        return np.frombuffer(handle.read((stop - start) * dtype.itemsize), dtype=dtype)


def _save_shard_tables(work: Path, shard: int, fields: list, lengths: list, sizes: list) -> None:
    """Keep-priority fields and normalised-text offsets of every row (shingles/s<shard>.npz), row sizes (rows/)."""
    keys = doc_keys(shard, np.arange(len(fields)))
    prio = priority_array(fields, keys)
    offsets = np.zeros(len(fields) + 1, dtype=np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    save_array(work / "shingles" / f"s{shard:06d}.npz", None, keys=keys, offsets=offsets,
               **{name: prio[name] for name in prio.dtype.names if name != "key"})
    make_folder(work / "rows")
    save_array(work / "rows" / f"s{shard:06d}.npy", np.concatenate(sizes + [np.zeros(0, dtype=np.int64)]))


def _bucket_task(job: dict) -> tuple[int, np.ndarray]:
    """Reduce: (buckets shared by >= 2 documents, candidate pairs) of one partition, from its rows of
    every shard's bucket file (``job["slices"]``: (file, first row, end row))."""
    parts = [_load_rows(location(path), start, stop) for path, start, stop in job["slices"]]
    if not parts:
        return 0, np.zeros((0, 2), dtype=np.uint64)
    records = np.concatenate(parts)
    pairs, buckets = bucket_pairs(records["band"], records["key"], records["doc"], job["all_pairs_up_to"])
    return buckets, pairs


def _text_file(npz: Path) -> Path:
    """Where ``_signature_task`` puts a shard's normalised texts beside its .npz of keys and offsets."""
    return npz.with_name(npz.name.replace(".npz", ".text"))


def _stored_texts(npz: Path) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, normalised UTF-8 bytes) of one shard as ``_signature_task`` stored them; a local
    file is memory-mapped, so only the candidate documents' pages are read."""
    with load_array(npz) as data:
        offsets = data["offsets"]
    path = _text_file(npz)
    if offsets[-1] == 0:
        return offsets, np.zeros(0, dtype=np.uint8)
    if is_remote(path):
        return offsets, np.frombuffer(path.read_bytes(), dtype=np.uint8)
    return offsets, np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))  # a plain view: slicing a memmap is slower


def _gather(texts: dict, shards: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, bounds): document k's stored bytes texts[shards[k]][starts[k]:stops[k]] are
    ``bytes[bounds[k]:bounds[k+1]]``; a slice copy per document (a memory map reads only those pages;
    index arrays of every byte cost more than the copy)."""
    bounds = np.r_[0, np.cumsum(stops - starts)]
    out = np.empty(bounds[-1], dtype=np.uint8)
    for shard, start, stop, at in zip(shards.tolist(), starts.tolist(), stops.tolist(), bounds[:-1].tolist()):
        out[at : at + stop - start] = texts[shard][start:stop]
    return out, bounds


def _verify_task(job: dict) -> tuple[np.ndarray, int]:
    """(similarity of each candidate pair, pairs screened). With ``job["screen_margin"]``, a pair
    whose MinHash estimate (its share of equal signature values) is below the threshold by more
    than the margin is not compared: its estimate, below the threshold, is its value. With 100
    hashes the estimate's error is at most ~0.05 (one standard deviation), so a margin of 0.25
    screens out a pair that truly reaches the threshold with probability ~1e-8, and most of the
    pairs LSH makes candidates (Jaccard 0.3-0.5 at 20 x 5 bands) go uncompared. The others: their
    true Jaccard (_exact_jaccard)."""
    pairs = job["pairs"]
    out = np.empty(len(pairs), dtype=np.float32)
    compare = np.ones(len(pairs), dtype=bool)
    if job["screen_margin"] is not None and len(pairs):
        estimate = _estimates(pairs, location(job["shingle_dir"]).parent / "signatures")
        compare = estimate >= job["threshold"] - job["screen_margin"]
        out[~compare] = estimate[~compare]
    out[compare] = _exact_jaccard({**job, "pairs": pairs[compare]})
    return out, int(np.count_nonzero(~compare))


def _estimates(pairs: np.ndarray, signature_dir: Path) -> np.ndarray:
    """Each pair's share of equal MinHash signature values (as the signing step stored them)."""
    keys = sorted_distinct(pairs.ravel())
    shards, rows = split_keys(keys)
    signatures = None
    for shard in sorted_distinct(shards).tolist():
        here = shards == shard
        table = load_array(signature_dir / f"s{shard:06d}.npy", mapped=True)  # each task reads its pairs' rows
        if signatures is None:
            signatures = np.empty((len(keys), table.shape[1]), dtype=table.dtype)
        signatures[here] = table[rows[here]]
    first, second = np.searchsorted(keys, pairs[:, 0]), np.searchsorted(keys, pairs[:, 1])
    return (signatures[first] == signatures[second]).mean(axis=1)


def _exact_jaccard(job: dict) -> np.ndarray:
    """True Jaccard (float32) of each candidate pair that reaches ``job["threshold"]``, a value below
    it for the others (their comparison stops once the threshold is out of reach): only the pairs'
    documents are gathered, shingle-hashed and compared, in pieces of at most _VERIFY_BYTES
    normalised bytes."""
    from trident.curate.dedup.kernels.loops import hashes_of_normalised, pair_jaccard

    pairs, shingle_dir, ngram, unit = job["pairs"], location(job["shingle_dir"]), job["ngram"], job["unit"]
    keys = sorted_distinct(pairs.ravel())
    shards, rows = split_keys(keys)
    starts, stops = np.empty(len(keys), dtype=np.int64), np.empty(len(keys), dtype=np.int64)
    texts = {}
    for shard in sorted_distinct(shards).tolist():
        here = shards == shard
        offsets, texts[shard] = _stored_texts(shingle_dir / f"s{shard:06d}.npz")
        starts[here], stops[here] = offsets[rows[here]], offsets[rows[here] + 1]
    first, second = np.searchsorted(keys, pairs[:, 0]), np.searchsorted(keys, pairs[:, 1])
    cost = np.cumsum(stops[first] - starts[first] + stops[second] - starts[second])
    out = np.empty(len(pairs), dtype=np.float32)
    begin = 0
    while begin < len(pairs):  # each piece gathers at most about _VERIFY_BYTES bytes
        end = max(begin + 1, int(np.searchsorted(cost, cost[begin] + _VERIFY_BYTES, "right")))
        used = sorted_distinct(np.r_[first[begin:end], second[begin:end]])
        gathered, bounds = _gather(texts, shards[used], starts[used], stops[used])
        flat, offsets = hashes_of_normalised(gathered, bounds, ngram, unit, packed=True)
        local_a, local_b = np.searchsorted(used, first[begin:end]), np.searchsorted(used, second[begin:end])
        out[begin:end] = pair_jaccard(flat, offsets, local_a, local_b, job["threshold"])
        begin = end
    return out


def _pair_bytes(pairs: np.ndarray, shingle_dir: Path) -> np.ndarray:
    """Each pair's normalised text bytes (both documents): what verifying it costs, about."""
    shards, rows = split_keys(pairs.ravel())
    sizes = np.empty(len(rows), dtype=np.int64)
    for shard in sorted_distinct(shards).tolist():
        here = shards == shard
        with load_array(shingle_dir / f"s{shard:06d}.npz") as data:
            sizes[here] = np.diff(data["offsets"])[rows[here]]
    return sizes.reshape(pairs.shape).sum(axis=1)


def _equal_cost_bounds(cost: np.ndarray, tasks: int) -> np.ndarray:
    """Cut points splitting consecutive items into ``tasks`` runs of about equal total cost (pairs of
    long documents cost more to verify: equal counts left one worker waiting for the other)."""
    total = np.cumsum(cost)
    cuts = np.searchsorted(total, total[-1] * np.arange(1, tasks) / tasks, "right") if len(total) else []
    return sorted_distinct(np.r_[0, cuts, len(cost)]).astype(np.int64)


@register_stage("fuzzy_dedup")
class FuzzyDedup(GlobalStage):
    """Drop near-duplicates: MinHash + LSH candidates, verified by Jaccard, one kept per component."""

    worker_modules = ("trident.curate.dedup.kernels.loops",)
    reads_raw = True  # the signing map reads the raw inputs (see GlobalStage)

    def __init__(self, num_hashes: int = 100, bands: int = 10, ngram: int = 5, shingle: str = "char",
                 seed: int = 1, threshold: float = 0.7, priority: list[str] | None = None,
                 priority_field: str = "dataset", scope: str = "global", partitions: int = 16,
                 all_pairs_up_to: int = 32, keep: list[str] | None = None, screen_margin: float | None = 0.25) -> None:
        priority, keep = [] if priority is None else priority, list(KEEP_KEYS) if keep is None else keep
        validate_common(priority, priority_field, scope, partitions, keep)
        if not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be a Jaccard value in (0, 1], got {threshold!r}")
        if screen_margin is not None and not (isinstance(screen_margin, (int, float)) and 0.0 <= screen_margin <= 1.0):
            raise ValueError(f"screen_margin must be null or in [0, 1], got {screen_margin!r}")
        self.minhash = {"num_hashes": num_hashes, "bands": bands, "ngram": ngram, "unit": shingle, "seed": seed}
        MinHasher(**self.minhash)  # validates the MinHash parameters now, not inside a worker
        super().__init__(**self.minhash, threshold=threshold, priority=priority,
                         priority_field=priority_field, scope=scope, partitions=partitions,
                         all_pairs_up_to=all_pairs_up_to, keep=keep, screen_margin=screen_margin)
        self.threshold, self.priority, self.priority_field = float(threshold), priority, priority_field
        self.screen_margin = screen_margin
        self.keep = keep
        self.scope, self.partitions, self.all_pairs_up_to = scope, partitions, all_pairs_up_to

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Dedup ``inputs`` into ``out_dir``; the module docstring lists the steps and counters."""
        out_dir = location(out_dir)
        if getattr(executor, "dedup_on_workers", False):  # Ray: no step gathers pairs on the driver
            return run_distributed(self, inputs, out_dir, executor)
        work = out_dir / "_work_fuzzy_dedup"
        remove_tree(work)
        pairs = self._candidates(inputs, work, executor)
        similarity = self._verify(inputs, pairs, work, executor)
        verified = similarity >= self.threshold
        self.counters["verified_pairs"] += int(verified.sum())
        dropped = self._choose_drops(pairs[verified], similarity[verified], work / "shingles")
        outputs = apply_drops_lines(self, inputs, out_dir, executor, dropped, "duplicate", work / "rows")
        remove_tree(work)
        return outputs

    def _candidates(self, inputs: list[Path], work: Path, executor: Executor) -> np.ndarray:
        """Sign every shard, then pair documents sharing a bucket; unique (k, 2) doc-key pairs."""
        reads = self.raw_reads or [None] * len(inputs)
        jobs = [{"shard": i, "path": str(p), "read": read, "work": str(work), "minhash": self.minhash,
                 "scope": self.scope, "partitions": self.partitions, "priority": self.priority,
                 "priority_field": self.priority_field} for i, (p, read) in enumerate(zip(inputs, reads))]
        signed = executor.map(_signature_task, jobs, desc="fuzzy_dedup: minhash")
        self.counters["no_shingles"] += sum(result["no_shingles"] for result in signed)
        files = [str(work / "buckets" / f"s{shard:06d}.npy") for shard in range(len(inputs))]
        jobs = [{"slices": [(f, r["bounds"][p], r["bounds"][p + 1]) for f, r in zip(files, signed)
                            if r["bounds"][p + 1] > r["bounds"][p]],
                 "all_pairs_up_to": self.all_pairs_up_to} for p in range(self.partitions)]
        results = executor.map(_bucket_task, jobs, desc="fuzzy_dedup: buckets")
        self.counters["shared_buckets"] += sum(r[0] for r in results)
        pairs = unique_pairs(np.concatenate([r[1] for r in results] + [np.zeros((0, 2), dtype=np.uint64)]))
        self.counters["candidates"] += len(pairs)
        return pairs

    def _verify(self, inputs: list[Path], pairs: np.ndarray, work: Path, executor: Executor) -> np.ndarray:
        """Jaccard of every candidate pair (order of ``pairs``), from the texts the signing kept: exact for
        the pairs that reach the threshold, a bound below it for the others."""
        if len(pairs) == 0:
            return np.zeros(0, dtype=np.float32)
        # A multiple of the workers (this process is one of them), tasks of equal cost: 3 tasks on 2
        # workers left one worker to verify the third alone (1.5x, not 2x, for the step).
        workers = getattr(executor, "workers", 1)
        tasks = min(len(pairs), -(-len(pairs) // (_VERIFY_BATCH * workers)) * workers)
        # The pairs of one candidate cluster next to each other: a verification piece then makes a
        # document's shingle keys once for all its pairs (in candidate order, once for each piece
        # holding one of them: nearly twice the bytes on a corpus of many copies).
        nodes, labels = component_labels(pairs)
        order = np.argsort(labels[np.searchsorted(nodes, pairs[:, 0])], kind="stable")
        grouped = pairs[order]
        bounds = _equal_cost_bounds(_pair_bytes(grouped, work / "shingles"), tasks)
        jobs = [{"pairs": grouped[a:b], "shingle_dir": str(work / "shingles"), "ngram": self.minhash["ngram"],
                 "unit": self.minhash["unit"], "threshold": self.threshold, "screen_margin": self.screen_margin}
                for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        results = executor.map(_verify_task, jobs, desc="fuzzy_dedup: verify")
        self.counters["screened_pairs"] += sum(screened for _, screened in results)
        similarity = np.empty(len(pairs), dtype=np.float32)
        similarity[order] = np.concatenate([values for values, _ in results])
        return similarity

    def _choose_drops(self, verified: np.ndarray, similarity: np.ndarray, shingle_dir: Path) -> np.ndarray:
        """Components of the verified pairs; every member but each component's best one is dropped:
        ``drop_records`` naming the kept copy and the Jaccard of the two."""
        if len(verified) == 0:
            return drop_records(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=str), np.zeros(0, np.float32))
        nodes, labels = component_labels(verified)
        prio = self._priorities(nodes, shingle_dir)
        prio = prio[np.searchsorted(prio["key"], nodes)]  # row i is nodes[i]'s
        order = best_first(prio, self.keep)
        order = order[np.argsort(labels[order], kind="stable")]  # by component, best first
        grouped = labels[order]
        starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
        sizes = np.diff(np.r_[starts, len(grouped)])
        self.counters["components"] += len(starts)
        for size, count in zip(*(values.tolist() for values in np.unique(sizes, return_counts=True))):
            self.counters[f"hist:cluster_size:{cluster_size_bin(size)}"] += count
        kept = np.delete(np.repeat(order[starts], sizes), starts)  # each dropped member's component's best
        dropped = np.delete(order, starts)
        self.counters.update(f"{KEPT_LANGUAGE}{code}" for code in prio["language"][kept].tolist() if code)
        pairs = np.stack([prio["key"][dropped], prio["key"][kept]], axis=1)
        return drop_records(pairs[:, 0], prio["id"][kept], self._kept_similarity(pairs, verified, similarity,
                                                                                  shingle_dir))

    def _kept_similarity(self, pairs: np.ndarray, verified: np.ndarray, similarity: np.ndarray,
                         shingle_dir: Path) -> np.ndarray:
        """Jaccard of each (dropped, kept) pair: the verified one where the two were compared, else
        computed now (a member of a chain A-B-C compared with B only)."""
        known = {pair: value for pair, value in zip(map(tuple, np.sort(verified, axis=1).tolist()), similarity.tolist())}
        wanted = [tuple(pair) for pair in np.sort(pairs, axis=1).tolist()]
        out = np.array([known.get(pair, np.nan) for pair in wanted], dtype=np.float32)
        missing = np.flatnonzero(np.isnan(out))
        if len(missing):
            out[missing] = _exact_jaccard({"pairs": pairs[missing], "shingle_dir": str(shingle_dir), "threshold": 0.0,
                                           "ngram": self.minhash["ngram"], "unit": self.minhash["unit"]})
        return out

    @staticmethod
    def _priorities(keys: np.ndarray, shingle_dir: Path) -> np.ndarray:
        """Keep-priority records of the given documents, read from the shard tables."""
        parts = []
        for shard in sorted_distinct(split_keys(keys)[0]).tolist():
            with load_array(shingle_dir / f"s{shard:06d}.npz") as data:
                parts.append(stored_priorities(data, np.isin(data["keys"], keys)))
        return concat_structured(parts)
