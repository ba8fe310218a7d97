"""Distributed fuzzy dedup: connected components by large-star / small-star, the same kept set and
counters as the local path, only counts crossing to the driver, and the Ray executor taking it."""
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from dedup_fixtures import random_graph, smallest_in_component
from trident.curate.dedup import fuzzy
from trident.curate.dedup.components import (both_directions, large_star, node_partition, small_star, star_labels,
                                             unstable_nodes)
from trident.curate.dedup.fuzzy import FuzzyDedup
from trident.curate.document import Document
from trident.curate.droplog import SUFFIX, read_log
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor, RayExecutor


class WorkerDedupExecutor(LocalExecutor):
    """One local process that takes the distributed path and records every job and result size."""

    dedup_on_workers = True

    def __init__(self) -> None:
        super().__init__(1, progress=False)
        self.calls: list[tuple[str, int, int]] = []  # (function, pickled job bytes, pickled result bytes)

    def map(self, fn, items, desc=None):
        items = list(items)
        results = super().map(fn, items, desc)
        self.calls += [(fn.__name__, len(pickle.dumps(i)), len(pickle.dumps(r))) for i, r in zip(items, results)]
        return results


def components_by_stars(pairs: np.ndarray, partitions: int) -> dict[int, int]:
    """Node -> label by alternating star rounds over ``partitions`` node partitions (as the tasks do)."""
    records, round_ = both_directions(pairs), 0
    while True:
        part = node_partition(records[:, 0], partitions)
        step = large_star if round_ % 2 == 0 else small_star
        unstable = sum(unstable_nodes(records[part == p]) for p in range(partitions))
        output = both_directions(np.concatenate([step(records[part == p]) for p in range(partitions)]))
        if unstable == 0:
            assert np.array_equal(output, records)  # a graph of stars is a fixed point of both steps
            break
        records, round_ = output, round_ + 1
        assert round_ < 60
    labels: dict[int, int] = {}
    part = node_partition(records[:, 0], partitions)
    for p in range(partitions):
        nodes, found = star_labels(records[part == p])
        labels.update(zip(nodes.tolist(), found.tolist()))
    return labels


@pytest.mark.parametrize("seed", range(6))
def test_star_rounds_label_each_component_by_its_smallest_node(seed):
    pairs = random_graph(seed)
    assert components_by_stars(pairs, partitions=1 + seed % 5) == smallest_in_component(pairs, min_size=2)


def test_unstable_nodes_detects_non_stars():
    star = both_directions(np.array([[1, 5], [1, 7], [2, 9]], dtype=np.uint64))
    assert unstable_nodes(star) == 0
    assert unstable_nodes(both_directions(np.array([[1, 5], [5, 7]], dtype=np.uint64))) == 1  # 5: both sides
    assert unstable_nodes(both_directions(np.array([[1, 7], [2, 7]], dtype=np.uint64))) == 1  # 7: two centres


# ---- the stage ---------------------------------------------------------------------------------

def words(rng: random.Random, n: int) -> list[str]:
    return [f"w{rng.randrange(30000)}" for _ in range(n)]


def clustered_corpus(seed: int, shards: int = 4) -> list[list[Document]]:
    """Unrelated documents, near-copy clusters of 2..40 members (edited copies, chains of edits),
    random datasets, qualities and lengths, shuffled over ``shards`` shards."""
    rng = random.Random(seed)
    docs = []
    for c in range(14):
        base = words(rng, 160)
        for m in range(rng.choice([2, 3, 5, 9, 40]) if c else 40):
            text = list(base)
            for i in rng.sample(range(160), rng.randrange(0, 6)):
                text[i] = f"e{rng.randrange(10**6)}"
            if c % 3 == 0:  # chains: each member edits the previous one, so ends drift apart
                base = text
            meta = {"dataset": rng.choice(["cc", "wiki", "books"])}
            if rng.random() < 0.7:
                meta["quality_score"] = rng.choice([0.2, 0.5, 0.9])
            docs.append(Document(f"c{c:02d}m{m:02d}", " ".join(text + words(rng, rng.randrange(3))), meta))
    docs += [Document(f"u{i:03d}", " ".join(words(rng, 160)), {"dataset": "cc"}) for i in range(60)]
    docs += [Document("empty", "   ", {})]
    rng.shuffle(docs)
    return [docs[i::shards] for i in range(shards)]


def write_corpus(folder: Path, shards: list[list[Document]]) -> list[Path]:
    paths = [folder / f"shard{i}.jsonl.zst" for i in range(len(shards))]
    for path, docs in zip(paths, shards):
        write_shard(path, docs)
    return paths


def kept_ids(paths: list[Path]) -> list[str]:
    return sorted(doc.id for p in paths for doc in read_shard(p))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Path]:
    return write_corpus(tmp_path_factory.mktemp("corpus"), clustered_corpus(seed=3))


PARAMS = [{"bands": 20, "threshold": 0.8, "partitions": 5, "all_pairs_up_to": 4},
          {"partitions": 1, "priority": ["wiki", "books"]},
          {"bands": 20, "threshold": 0.75, "partitions": 3, "scope": "dataset", "priority": ["books"]}]


@pytest.mark.parametrize("params", PARAMS)
def test_distributed_path_keeps_what_the_local_path_keeps(tmp_path, corpus, params):
    local, distributed = FuzzyDedup(**params), FuzzyDedup(**params)
    expected = kept_ids(local.run(corpus, tmp_path / "local", LocalExecutor(1, progress=False)))
    executor = WorkerDedupExecutor()
    assert kept_ids(distributed.run(corpus, tmp_path / "dist", executor)) == expected
    assert dict(distributed.counters) == dict(local.counters)
    assert local.counters["components"] >= 10 and local.counters["dropped:duplicate"] >= 60
    # every duplicate's record names the same kept copy and similarity on both paths (issue 60 item 5)
    records = [{r["id"]: (r["kept"], r["similarity"]) for log in sorted((tmp_path / folder).glob(f"*{SUFFIX}"))
                for r in read_log(log)} for folder in ("local", "dist")]
    assert len(records[0]) == local.counters["dropped:duplicate"] and records[0].keys() == records[1].keys()
    for doc_id, (kept, similarity) in records[0].items():
        assert records[1][doc_id][0] == kept and abs(records[1][doc_id][1] - similarity) < 1e-3
        assert kept in expected and 0.0 < similarity <= 1.0
    assert {name for name, _, _ in executor.calls} >= {"_star_task", "_choose_task", "drop_files_task"}
    assert not (tmp_path / "dist" / "_work_fuzzy_dedup").exists()


def test_driver_sends_and_receives_only_counts(tmp_path, corpus):
    executor = WorkerDedupExecutor()
    stage = FuzzyDedup(bands=20, threshold=0.8, partitions=4)
    stage.run(corpus, tmp_path / "out", executor)
    assert stage.counters["verified_pairs"] > 300  # the graph is far larger than what crosses below
    largest_job = max(job for _, job, _ in executor.calls)
    largest_result = max(result for _, _, result in executor.calls)
    assert largest_job < 1024 and largest_result < 512, executor.calls


def test_empty_and_duplicate_free_inputs(tmp_path):
    rng = random.Random(1)
    inputs = write_corpus(tmp_path / "in", [[Document(f"d{i}", " ".join(words(rng, 50))) for i in range(5)], []])
    stage = FuzzyDedup()
    assert kept_ids(stage.run(inputs, tmp_path / "out", WorkerDedupExecutor())) == [f"d{i}" for i in range(5)]
    assert stage.counters["verified_pairs"] == 0 and "components" not in stage.counters
    assert FuzzyDedup().run([], tmp_path / "none", WorkerDedupExecutor()) == []


@pytest.mark.timeout(120)
def test_ray_two_workers_match_local_executor(tmp_path, corpus, monkeypatch, ray_cluster):
    import ray

    taken = []
    real = fuzzy.run_distributed
    monkeypatch.setattr(fuzzy, "run_distributed", lambda *a: taken.append(1) or real(*a))
    params = PARAMS[0]
    local, on_ray = FuzzyDedup(**params), FuzzyDedup(**params)
    expected = kept_ids(local.run(corpus, tmp_path / "local", LocalExecutor(1, progress=False)))
    executor = RayExecutor(workers=2, progress=False)  # joins the session's cluster of 2 CPUs
    try:
        assert executor.workers == 2
        assert kept_ids(on_ray.run(corpus, tmp_path / "ray", executor)) == expected
    finally:
        executor.close()
    assert ray.is_initialized()  # it left up the cluster it joined (ray_cluster checks a starter shuts it down)
    assert taken == [1] and dict(on_ray.counters) == dict(local.counters)
