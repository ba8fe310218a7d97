"""Fuzzy dedup end to end, one process: trident's fuzzy_dedup stage against datasketch and rensa.

Every method reads the same JSONL.zst shards and writes the kept documents as JSONL.zst shards:
- trident: the fuzzy_dedup stage (`bands` x 5 rows, threshold 0.7, LocalExecutor(1)); CPU seconds
  of each executor.map step (minhash, buckets, shingles, verify, write) and of the driver between
  them (pairs, union-find, priorities);
- datasketch: MinHash(num_perm=100, seed=1) with its default hash (sha1) over the same char-5-gram
  shingles, MinHashLSH(num_perm=100, params=(bands, 5)), the usual one-pass dedup: a document
  whose query finds an already-kept document is dropped, otherwise inserted. No verification;
- datasketch+xxh32: the same with its fastest documented setting, MinHash(hashfunc=xxhash.xxh32_intdigest);
- rensa (Rust MinHash): RMinHash(num_perm=100, seed=1), RMinHashLSH(threshold=0.7, num_perm=100,
  num_bands=bands), the same one-pass query-then-insert.
The peers' I/O is the lean one (zstandard stream, json.loads per line, raw kept lines written back).
Quality: recall = planted pairs of exact char-5-gram Jaccard >= 0.8 with at least one document
dropped; "unjustified drops" = dropped documents with no exact J >= 0.7 partner among the candidate
pairs of all three methods (documents a dedup should not remove).
"""
from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path

import datasketch
import numpy as np
import rensa
import xxhash
import zstandard

from common import Timer

from trident.curate.dedup.fuzzy import FuzzyDedup
from trident.curate.dedup.minhash import MinHasher, bucket_pairs
from trident.curate.dedup.shingles import shingles
from trident.curate.document import Document
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor

ROWS, THRESHOLD, RECALL_AT = 5, 0.7, 0.8


class TimedExecutor:
    """LocalExecutor(1) that adds up the CPU seconds of each map step by its description."""

    def __init__(self) -> None:
        self.inner, self.seconds = LocalExecutor(1, progress=False), defaultdict(float)

    def map(self, fn, items, desc=None):
        with Timer() as timer:
            out = self.inner.map(fn, items, desc=desc)
        self.seconds[(desc or fn.__name__).split(": ")[-1]] += timer.cpu
        return out


def write_corpus(texts: list[str], work: Path, shards: int = 4) -> list[Path]:
    paths = [work / f"in{k}.jsonl.zst" for k in range(shards)]
    for k, path in enumerate(paths):
        write_shard(path, [Document(f"d{i}", texts[i]) for i in range(k, len(texts), shards)])
    return paths


def _read_lines(path: Path):
    with open(path, "rb") as fh:
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
        for line in io.BufferedReader(reader):
            if line.strip():
                yield line


def _one_pass(paths: list[Path], out: Path, sketch, lsh, query, insert) -> tuple[set[str], dict]:
    """Query-then-insert dedup over the shards; kept ids and, per dropped id, the ids it matched."""
    kept, hits = set(), {}
    out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        with open(out / path.name, "wb") as fh, zstandard.ZstdCompressor(level=3).stream_writer(fh) as writer:
            for line in _read_lines(path):
                record = json.loads(line)
                m = sketch(record["text"])
                found = query(lsh, m)
                if found:
                    hits[record["id"]] = found
                    continue
                insert(lsh, record["id"], m)
                kept.add(record["id"])
                writer.write(line)
    return kept, hits


def run_datasketch(paths: list[Path], out: Path, bands: int, hashing: dict | None = None):
    def sketch(text):
        m = datasketch.MinHash(num_perm=100, seed=1, **(hashing or {}))
        m.update_batch([s.encode("utf-8") for s in shingles(text, 5)])
        return m

    lsh = datasketch.MinHashLSH(num_perm=100, params=(bands, ROWS))
    return _one_pass(paths, out, sketch, lsh, lambda index, m: index.query(m), lambda index, k, m: index.insert(k, m))


def run_datasketch_xxh32(paths: list[Path], out: Path, bands: int):
    return run_datasketch(paths, out, bands, {"hashfunc": xxhash.xxh32_intdigest})


def run_rensa(paths: list[Path], out: Path, bands: int):
    names: list[str] = []

    def sketch(text):
        m = rensa.RMinHash(num_perm=100, seed=1)
        m.update(list(shingles(text, 5)))
        return m

    def insert(index, key, m):
        index.insert(len(names), m)  # rensa keys are integers
        names.append(key)

    lsh = rensa.RMinHashLSH(threshold=THRESHOLD, num_perm=100, num_bands=bands)
    kept, hits = _one_pass(paths, out, sketch, lsh, lambda index, m: [names[k] for k in index.query(m)], insert)
    return kept, hits


def run_trident(paths: list[Path], out: Path, bands: int):
    stage, executor = FuzzyDedup(bands=bands, threshold=THRESHOLD), TimedExecutor()
    with Timer() as timer:
        outputs = stage.run(paths, out, executor)
    parts = dict(executor.seconds)
    parts["driver"] = timer.cpu - sum(parts.values())
    return {d.id for p in outputs for d in read_shard(p)}, parts


def trident_candidates(texts: list[str], bands: int) -> set[tuple[int, int]]:
    hasher = MinHasher(bands=bands)
    keys = hasher.band_keys(hasher.signatures(texts))
    n = len(texts)
    pairs, _ = bucket_pairs(np.tile(np.arange(bands), n), keys.ravel(), np.repeat(np.arange(n, dtype=np.uint64), bands))
    return set(map(tuple, pairs.tolist()))


def quality(kept: set[str], n: int, planted: list[tuple[int, int, float]], justified: set[int]) -> dict:
    dropped = {i for i in range(n) if f"d{i}" not in kept}
    targets = [(a, b) for a, b, j in planted if j >= RECALL_AT]
    found = sum(a in dropped or b in dropped for a, b in targets)
    return {"dropped": len(dropped), "recall_planted": found / max(1, len(targets)), "planted": len(targets),
            "unjustified_drops": len(dropped - justified)}


def measure(texts: list[str], codes: list[np.ndarray], planted, work: Path, bands: int, rounds: int,
            exact_jaccard) -> dict:
    """Best-of-`rounds` CPU seconds of the three methods (order alternating), ratios and quality."""
    paths = write_corpus(texts, work)
    methods = {"trident": run_trident, "datasketch": run_datasketch, "datasketch+xxh32": run_datasketch_xxh32,
               "rensa": run_rensa}
    cpu, results, parts = defaultdict(list), {}, []
    for r in range(rounds):
        for name in (list(methods) if r % 2 == 0 else list(methods)[::-1]):
            with Timer() as timer:
                results[name] = methods[name](paths, work / f"out_{name}", bands)
            cpu[name].append(timer.cpu)
        parts.append(results["trident"][1])
    pool = trident_candidates(texts, bands)
    index = {f"d{i}": i for i in range(len(texts))}
    for name in ("datasketch", "datasketch+xxh32", "rensa"):
        pool |= {tuple(sorted((index[a], index[b]))) for a, found in results[name][1].items() for b in found}
    justified = {x for a, b in pool if exact_jaccard(codes[a], codes[b]) >= THRESHOLD for x in (a, b)}
    best = {name: min(times) for name, times in cpu.items()}
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    out = {"bands": bands, "docs": len(texts), "mb": megabytes, "rounds": rounds, "cpu_s": dict(cpu),
           "trident_parts_s": parts[int(np.argmin(cpu["trident"]))],  # of its fastest round
           **{f"speedup_vs_{name}": best[name] / best["trident"] for name in methods if name != "trident"}}
    for name in methods:
        out[name] = {"docs_per_s": len(texts) / best[name], "mb_per_s": megabytes / best[name],
                     **quality(results[name][0], len(texts), planted, justified)}
    return out
