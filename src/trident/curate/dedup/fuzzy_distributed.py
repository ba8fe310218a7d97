"""Fuzzy dedup with no single-machine step: every step is a map over shards or hash partitions whose
tasks read and write files, and the driver receives only counts (the path the Ray executor takes).

It keeps exactly the documents ``FuzzyDedup``'s local path keeps (same band keys, same candidate
pairs, same Jaccard check, same ``best_first`` choice per connected component); only where the
work runs differs. Steps, each one ``executor.map``:
  1. sign (per shard): LSH band records to ``partitions`` bucket files, chosen by band key;
  2. buckets (per partition): candidate pairs of every shared bucket, sent to the shard of the
     pair's first document; the documents each shard must load, sent to that shard;
  3. shingles (per shard): shingle hashes and keep-priority fields of its candidate documents;
  4. verify (per shard): its pairs deduplicated, screened by MinHash estimate as the local path
     screens them, the rest's true Jaccard against one other shard's file at a time; pairs >=
     threshold become neighbour records, hash-partitioned by node;
  5. components (per partition, repeated): large-star / small-star rounds (trident.curate.dedup.components)
     until the per-partition counts of unstable nodes sum to 0;
  6. labels (per partition): each node's component label (its smallest member), sent to its shard;
  7. join (per shard): labels joined with keep-priority fields, sent to a partition by label;
  8. choose (per partition): every component's best document kept, the rest sent to their shard
     with the key and id of their kept copy;
  9. similarity (per shard): the Jaccard of each dropped document and its kept copy, for its record;
 10. write (per shard): the shard copied without its dropped rows.
The driver holds the job lists (O(shards + partitions)) and the returned counters, never pairs,
edges or per-document labels.
"""
from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import numpy as np

from trident.curate.dedup.components import (both_directions, cluster_size_bin, large_star, node_partition, small_star,
                                             star_labels, unique_pairs, unstable_nodes)
from trident.curate.dedup.drop_rows import KEPT_LANGUAGE, drop_files_task, drop_records
from trident.curate.dedup.keys import (best_first, dataset_salt, doc_key, priority_array, priority_fields, split_keys,
                                       stored_priorities)
from trident.curate.dedup.minhash import BUCKET_DTYPE, MinHasher, bucket_pairs, jaccard
from trident.curate.dedup.partitions import load_partition, save_partitioned
from trident.curate.document import CurateError
from trident.curate.read.shards import output_level, read_shard
from trident.curate.stage import Executor, GlobalStage, output_paths
from trident.text.storage import load_array, location, make_folder, remove_tree, save_array

log = logging.getLogger(__name__)
_SIGNATURE_BATCH = 256  # documents whose shingles are held at once while signing
_MAX_ROUNDS = 200  # large-star / small-star needs O(log^2 n) rounds; far more means a defect


def _sign_task(job: dict) -> Counter:
    """Band records (band, key, doc) of one shard's documents, written to bucket partitions by key."""
    hasher = MinHasher(**job["minhash"])
    counters, chunks, batch = Counter(), [], []

    def flush() -> None:
        docs, hashes, salts = zip(*batch)
        keys = hasher.band_keys(hasher.signatures_from_hashes(hashes)) ^ np.array(salts, np.uint64)[:, None]
        records = np.empty(keys.size, dtype=BUCKET_DTYPE)
        records["band"] = np.tile(np.arange(hasher.bands), len(docs))
        records["key"], records["doc"] = keys.ravel(), np.repeat(np.array(docs, np.uint64), hasher.bands)
        chunks.append(records)
        batch.clear()

    for row, doc in enumerate(read_shard(location(job["path"]))):
        hashes = hasher.hashes(doc.text)
        if hashes.size == 0:
            counters["no_shingles"] += 1  # empty text: left to exact dedup, never bucketed
            continue
        batch.append((doc_key(job["shard"], row), hashes, dataset_salt(doc, job["scope"])))
        if len(batch) >= _SIGNATURE_BATCH:
            flush()
    if batch:
        flush()
    if chunks:
        records = np.concatenate(chunks)
        save_partitioned(records, (records["key"] % np.uint64(job["partitions"])).astype(np.int64),
                location(job["work"]) / "buckets", "p", f"s{job['shard']:06d}")
    return counters


def _bucket_task(job: dict) -> tuple[int, int]:
    """Candidate pairs of one bucket partition, sent to the first document's shard; (buckets, pairs)."""
    records = load_partition(location(job["work"]) / "buckets" / f"p{job['part']:06d}")
    if records is None:
        return 0, 0
    pairs, buckets = bucket_pairs(records["band"], records["key"], records["doc"], job["all_pairs_up_to"])
    name, work = f"p{job['part']:06d}", location(job["work"])
    save_partitioned(pairs, split_keys(pairs[:, 0])[0], work / "pairs", "s", name)
    needed = np.unique(pairs)
    save_partitioned(needed, split_keys(needed)[0], work / "needed", "s", name)
    return buckets, len(pairs)


def _shingle_task(job: dict) -> None:
    """Save shingle hashes and keep-priority fields of the shard's candidate documents (sorted keys)."""
    needed = load_partition(location(job["work"]) / "needed" / f"s{job['shard']:06d}")
    if needed is None:
        return
    hasher, wanted = MinHasher(**job["minhash"]), set(split_keys(np.unique(needed))[1].tolist())
    rows, hashes, fields = [], [], []
    for row, doc in enumerate(read_shard(location(job["path"]))):
        if row in wanted:
            rows.append(row)
            hashes.append(hasher.hashes(doc.text))
            fields.append(priority_fields(doc, job["priority"], job["priority_field"]))
    prio = priority_array(fields, np.array([doc_key(job["shard"], r) for r in rows], dtype=np.uint64))
    offsets = np.cumsum([0] + [h.size for h in hashes]).astype(np.int64)
    target = location(job["work"]) / "shingles" / f"s{job['shard']:06d}.npz"
    make_folder(target.parent)
    flat = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    signatures = hasher.signatures_from_hashes(hashes) if hashes else np.zeros((0, hasher.num_hashes), np.uint32)
    save_array(target, None, keys=prio["key"], offsets=offsets, hashes=flat, signatures=signatures,
             **{name: prio[name] for name in prio.dtype.names if name != "key"})


def _load_shingles(work: Path, shard: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sorted keys, offsets, flat hashes, signatures) of one shard's saved candidate documents."""
    with load_array(work / "shingles" / f"s{shard:06d}.npz") as data:
        return data["keys"], data["offsets"], data["hashes"], data["signatures"]


def _verify_task(job: dict) -> tuple[int, int, int]:
    """Unique candidate pairs of one shard checked by true Jaccard, but for those screened out by
    their MinHash estimate as the local path screens them (fuzzy._verify_task); verified ones become
    neighbour records in graph/r000, partitioned by node. Returns (candidates, verified, screened)."""
    work, shard = location(job["work"]), job["shard"]
    pairs = load_partition(work / "pairs" / f"s{shard:06d}")
    if pairs is None:
        return 0, 0, 0
    pairs = unique_pairs(pairs)  # every copy of a pair came here: same first document
    keys_a, offsets_a, flat_a, signatures_a = _load_shingles(work, shard)
    other_shard = split_keys(pairs[:, 1])[0]
    similar, screened = np.zeros(len(pairs), dtype=bool), 0
    for other in np.unique(other_shard).tolist():  # one other shard's hashes in memory at a time
        keys_b, offsets_b, flat_b, signatures_b = ((keys_a, offsets_a, flat_a, signatures_a) if other == shard
                                                   else _load_shingles(work, other))
        chosen = np.flatnonzero(other_shard == other)
        ia, ib = np.searchsorted(keys_a, pairs[chosen, 0]), np.searchsorted(keys_b, pairs[chosen, 1])
        if job["screen_margin"] is not None:
            estimate = (signatures_a[ia] == signatures_b[ib]).mean(axis=1)
            keep = estimate >= job["threshold"] - job["screen_margin"]
            screened += int(np.count_nonzero(~keep))
            chosen, ia, ib = chosen[keep], ia[keep], ib[keep]
        similar[chosen] = [jaccard(flat_a[offsets_a[i]:offsets_a[i + 1]], flat_b[offsets_b[j]:offsets_b[j + 1]])
                           >= job["threshold"] for i, j in zip(ia.tolist(), ib.tolist())]
    records = both_directions(pairs[similar])
    save_partitioned(records, node_partition(records[:, 0], job["partitions"]), work / "graph" / "r000", "p",
            f"s{shard:06d}")
    return len(pairs), int(similar.sum()), screened


def _star_task(job: dict) -> int:
    """One large-star or small-star step over one node partition, output written to the next
    round's partitions; returns the number of unstable nodes of its input."""
    graph = location(job["work"]) / "graph"
    records = load_partition(graph / f"r{job['round']:03d}" / f"p{job['part']:06d}")
    if records is None:
        return 0
    step = large_star if job["round"] % 2 == 0 else small_star
    out = both_directions(step(records))
    save_partitioned(out, node_partition(out[:, 0], job["partitions"]), graph / f"r{job['round'] + 1:03d}", "p",
            f"p{job['part']:06d}")
    return unstable_nodes(records)


def _label_task(job: dict) -> None:
    """(document, component label) of every node of one converged partition, sent to its shard."""
    work = location(job["work"])
    records = load_partition(work / "graph" / f"r{job['round']:03d}" / f"p{job['part']:06d}")
    if records is None:
        return
    nodes, labels = star_labels(records)
    save_partitioned(np.stack([nodes, labels], axis=1), split_keys(nodes)[0], work / "labels", "s",
            f"p{job['part']:06d}")


def _join_task(job: dict) -> None:
    """Keep-priority records of one shard's component members, with their labels, sent by label."""
    work, shard = location(job["work"]), job["shard"]
    labelled = load_partition(work / "labels" / f"s{shard:06d}")
    if labelled is None:
        return
    labelled = labelled[np.argsort(labelled[:, 0])]
    with load_array(work / "shingles" / f"s{shard:06d}.npz") as data:
        prio = stored_priorities(data, np.isin(data["keys"], labelled[:, 0]))
    records = np.empty(len(prio), dtype=prio.dtype.descr + [("label", "u8")])
    for name in prio.dtype.names:
        records[name] = prio[name]
    records["label"] = labelled[np.searchsorted(labelled[:, 0], prio["key"]), 1]
    save_partitioned(records, node_partition(records["label"], job["partitions"]), work / "groups", "p",
            f"s{shard:06d}")


def _choose_task(job: dict) -> Counter:
    """Every component of one label partition keeps its ``best_first`` document; the others are
    sent to their shard's pending list with their kept copy's key and id. Counts components, their
    sizes and the dropped documents by their kept copy's language."""
    work, counters = location(job["work"]), Counter()
    records = load_partition(work / "groups" / f"p{job['part']:06d}")
    if records is None:
        return counters
    order = best_first(records, job["keep"])
    order = order[np.argsort(records["label"][order], kind="stable")]  # by component, best first
    labels = records["label"][order]
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
    sizes = np.diff(np.r_[starts, len(labels)])
    for size in sizes.tolist():
        counters["components"] += 1
        counters[f"hist:cluster_size:{cluster_size_bin(size)}"] += 1
    kept = np.delete(np.repeat(order[starts], sizes), starts)
    counters.update(f"{KEPT_LANGUAGE}{code}" for code in records["language"][kept].tolist() if code)
    pending = np.empty(len(kept), dtype=[("key", "u8"), ("kept_key", "u8"), ("kept", records["id"].dtype)])
    pending["key"], pending["kept_key"], pending["kept"] = records["key"][np.delete(order, starts)], \
        records["key"][kept], records["id"][kept]
    save_partitioned(pending, split_keys(pending["key"])[0], work / "pending", "s", f"p{job['part']:06d}")
    return counters


def _similarity_task(job: dict) -> None:
    """The Jaccard of each of one shard's dropped documents and its kept copy (one other shard's
    shingle file in memory at a time), saved as ``drop_records`` for the write step."""
    work, shard = location(job["work"]), job["shard"]
    pending = load_partition(work / "pending" / f"s{shard:06d}")
    if pending is None:
        return
    keys_a, offsets_a, flat_a, _ = _load_shingles(work, shard)
    kept_shard = split_keys(pending["kept_key"])[0]
    similarity = np.zeros(len(pending), dtype=np.float32)
    for other in np.unique(kept_shard).tolist():
        keys_b, offsets_b, flat_b, _ = (keys_a, offsets_a, flat_a, None) if other == shard else _load_shingles(work, other)
        chosen = np.flatnonzero(kept_shard == other)
        ia = np.searchsorted(keys_a, pending["key"][chosen])
        ib = np.searchsorted(keys_b, pending["kept_key"][chosen])
        similarity[chosen] = [jaccard(flat_a[offsets_a[i]:offsets_a[i + 1]], flat_b[offsets_b[j]:offsets_b[j + 1]])
                              for i, j in zip(ia.tolist(), ib.tolist())]
    save_partitioned(drop_records(pending["key"], pending["kept"], similarity), np.full(len(pending), shard),
                     work / "drops", "s", f"s{shard:06d}")


def run_distributed(stage: GlobalStage, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
    """Fuzzy-dedup ``inputs`` into ``out_dir`` as ``stage`` (a FuzzyDedup) configures, adding to
    ``stage.counters`` the same counters as its local path; returns the output shard paths."""
    work = location(out_dir) / "_work_fuzzy_dedup"
    remove_tree(work)
    make_folder(work)
    base = {"work": str(work), "partitions": stage.partitions}
    shards = [{**base, "shard": i, "path": str(p)} for i, p in enumerate(inputs)]
    parts = [{**base, "part": p} for p in range(stage.partitions)]
    counters = stage.counters
    for found in executor.map(_sign_task, [{**j, "minhash": stage.minhash, "scope": stage.scope} for j in shards],
                              desc="fuzzy_dedup: minhash"):
        counters["no_shingles"] += found["no_shingles"]
    bucketed = executor.map(_bucket_task, [{**j, "all_pairs_up_to": stage.all_pairs_up_to} for j in parts],
                            desc="fuzzy_dedup: buckets")
    counters["shared_buckets"] += sum(b for b, _ in bucketed)
    executor.map(_shingle_task, [{**j, "minhash": stage.minhash, "priority": stage.priority,
                                  "priority_field": stage.priority_field} for j in shards],
                 desc="fuzzy_dedup: shingles")
    checked = executor.map(_verify_task, [{**j, "threshold": stage.threshold, "screen_margin": stage.screen_margin}
                                          for j in shards], desc="fuzzy_dedup: verify")
    counters["candidates"] += sum(c for c, _, _ in checked)
    counters["verified_pairs"] += sum(v for _, v, _ in checked)
    counters["screened_pairs"] += sum(s for _, _, s in checked)
    final_round = _converge(parts, work, executor)
    executor.map(_label_task, [{**j, "round": final_round} for j in parts], desc="fuzzy_dedup: labels")
    executor.map(_join_task, shards, desc="fuzzy_dedup: join")
    for found in executor.map(_choose_task, [{**j, "keep": stage.keep} for j in parts], desc="fuzzy_dedup: choose"):
        counters.update(found)
    executor.map(_similarity_task, shards, desc="fuzzy_dedup: similarity")
    outputs = output_paths(inputs, out_dir)
    jobs = [{**j, "src": str(i), "dst": str(o), "stage": stage.name, "level": output_level(stage.work_outputs)}
            for j, i, o in zip(shards, inputs, outputs)]
    for found in executor.map(drop_files_task, jobs, desc="fuzzy_dedup: write"):
        counters.update(found)
    remove_tree(work)
    return outputs


def _converge(parts: list[dict], work: Path, executor: Executor) -> int:
    """Run star rounds until no partition reports an unstable node; returns the round whose graph
    is final (each component a star around its smallest document)."""
    for round_ in range(_MAX_ROUNDS):
        unstable = sum(executor.map(_star_task, [{**j, "round": round_} for j in parts],
                                    desc=f"fuzzy_dedup: components round {round_}"))
        if round_ > 0:
            remove_tree(work / "graph" / f"r{round_ - 1:03d}")
        if unstable == 0:
            log.info("fuzzy_dedup: connected components converged after %d star rounds", round_)
            return round_
    raise CurateError(f"fuzzy_dedup: connected components did not converge in {_MAX_ROUNDS} rounds "
                      f"(work files in {work / 'graph'})")
