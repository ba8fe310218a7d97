"""Exact dedup sends dropped keys worker to worker: same result as a brute-force reference, and the
driver gets counts only from every map step."""
import math
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from dedup_fixtures import RecordingExecutor
from trident.curate.dedup.exact import ExactDedup
from trident.curate.document import CurateError, Document
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor

SPELLINGS = ["Hello World", "hello   world\n", " HELLO world ", "another text", "Another\tText", "", "  ", "unique"]


def corpus(folder: Path) -> list[Path]:
    """Five shards (one empty) of near-spellings of a few texts, across datasets, qualities and
    repeated ids; meta["n"] tells the documents apart."""
    rng, shards = random.Random(3), [[] for _ in range(5)]
    for i in range(60):
        meta = {"dataset": rng.choice(["cc", "wiki", "books"]), "n": i}
        if rng.random() < 0.6:
            meta["quality_score"] = rng.choice([0.1, 0.5, 0.9])
        shards[rng.choice([0, 1, 2, 4])].append(Document(f"d{rng.randrange(30):02d}", rng.choice(SPELLINGS), meta))
    paths = [folder / f"shard{s}.jsonl.zst" for s in range(len(shards))]
    for path, docs in zip(paths, shards):
        write_shard(path, docs)
    return paths


def reference(paths: list[Path], priority: list[str], scope: str) -> tuple[set, Counter]:
    """(meta["n"] of the kept documents, counters), grouping every document by hand."""
    groups: dict[tuple, list] = {}
    counters = Counter()
    for s, path in enumerate(paths):
        for row, doc in enumerate(read_shard(path)):
            counters["in"] += 1
            counters["bytes_in"] += doc.nbytes
            text = " ".join(doc.text.lower().split())
            dataset = doc.meta["dataset"] if scope == "dataset" else None
            rank = priority.index(doc.meta["dataset"]) if doc.meta["dataset"] in priority else len(priority)
            quality = doc.meta.get("quality_score", math.nan)
            best = (rank, math.inf if math.isnan(quality) else -quality, -len(doc.text), doc.id, s, row)
            groups.setdefault((dataset, text), []).append((best, doc.nbytes, doc.meta["n"]))
    kept = set()
    for members in groups.values():
        (_, nbytes, n), rest = min(members), len(members) - 1
        kept.add(n)
        counters["out"] += 1
        counters["bytes_out"] += nbytes
        counters["dropped:duplicate"] += rest
        counters["duplicate_groups"] += int(rest > 0)
    return kept, counters


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("priority,scope,partitions", [([], "global", 1), (["wiki", "cc"], "global", 4),
                                                       (["books"], "dataset", 3)])
def test_matches_reference_and_driver_gets_counts_only(tmp_path, workers, priority, scope, partitions):
    inputs = corpus(tmp_path / "in")
    expected_kept, expected_counters = reference(inputs, priority, scope)
    assert expected_counters["dropped:duplicate"] > 20  # the fixture has real duplicate groups
    stage, executor = ExactDedup(priority=priority, scope=scope, partitions=partitions), RecordingExecutor(workers)
    try:
        outputs = stage.run(inputs, tmp_path / "out", executor)
    finally:
        executor.close()
    assert {d.meta["n"] for path in outputs for d in read_shard(path)} == expected_kept
    assert dict(stage.counters) == dict(expected_counters)
    assert set(executor.returned) == {"exact_dedup: hash", "exact_dedup: group", "exact_dedup: write"}
    for desc, results in executor.returned.items():
        for result in results:
            values = list(result.values()) if isinstance(result, Counter) else \
                list(result) if isinstance(result, tuple) else [result]
            assert all(type(v) is int for v in values), (desc, result)  # no key arrays, no lists
    assert not (tmp_path / "out" / "_work_exact_dedup").exists()


class LosingExecutor(LocalExecutor):
    """Drop files vanish before the write step, as on nodes that do not share the output folder."""

    def map(self, fn, items, desc=None):
        if desc == "exact_dedup: write":
            shutil.rmtree(Path(items[0]["work"]) / "drops")
        return super().map(fn, items, desc)


@pytest.mark.timeout(60)
def test_lost_drop_files_are_an_error(tmp_path):
    with pytest.raises(CurateError, match="chosen to drop"):
        ExactDedup().run(corpus(tmp_path / "in"), tmp_path / "out", LosingExecutor(1, progress=False))
