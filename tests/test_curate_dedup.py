"""Exact and fuzzy dedup stages: grouping, keep-priority, scopes, partitioning, accounting."""
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest

from dedup_fixtures import RecordingExecutor, UnionFind, random_graph, smallest_in_component
from trident.curate.dedup.components import component_labels, unique_pairs
from trident.curate.dedup.exact import ExactDedup, exact_hash, normalize_for_exact
from trident.curate.dedup.fuzzy import FuzzyDedup
from trident.curate.dedup.keys import best_first, priority_array, priority_fields, stored_priorities
from trident.curate.dedup.minhash import jaccard
from trident.curate.dedup.shingles import shingle_hashes
from trident.curate.document import Document
from trident.curate.droplog import log_path, read_log
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor
from trident.curate.run.registry import build_stage

SERIAL = LocalExecutor(1, progress=False)


def random_text(rng: random.Random, words: int = 200) -> str:
    return " ".join(f"w{rng.randrange(20000)}" for _ in range(words))


def edit_words(rng: random.Random, text: str, n: int, positions=None) -> str:
    words = text.split()
    for i in positions if positions is not None else rng.sample(range(len(words)), n):
        words[i] = f"edit{rng.randrange(10**6)}"
    return " ".join(words)


def write_shards(tmp_path: Path, shards: list[list[Document]]) -> list[Path]:
    paths = []
    for i, docs in enumerate(shards):
        path = tmp_path / "in" / f"shard{i}.jsonl.zst"
        write_shard(path, docs)
        paths.append(path)
    return paths


def kept_ids(paths: list[Path]) -> list[str]:
    return sorted(doc.id for p in paths for doc in read_shard(p))


def assert_accounting(stage) -> None:
    c = stage.counters
    dropped = sum(v for k, v in c.items() if k.startswith("dropped:"))
    assert c["in"] == c["out"] + dropped
    assert c["bytes_in"] >= c["bytes_out"]


# ---- pure parts ------------------------------------------------------------------------------

def test_exact_normalisation_rule():
    assert normalize_for_exact("  Hello\t\tWORLD \n again ") == "hello world again"
    assert exact_hash("Hello   World\n") == exact_hash("hello world")
    assert exact_hash("Hello, World") != exact_hash("hello world")
    assert exact_hash("hello world", salt=1) != exact_hash("hello world", salt=2)
    # str.split's whitespace is the regex \s's on every BMP code point (Unicode has none past U+3000):
    # the keys did not change with it
    spaces = "".join(chr(c) for c in range(0x10000) if re.fullmatch(r"\s", chr(c)))
    assert spaces == "".join(chr(c) for c in range(0x10000) if chr(c).isspace()) and max(spaces) == "\u3000"
    text = f"{spaces}A{spaces}b\u2028C\x1f "
    assert normalize_for_exact(text) == re.sub(r"\s+", " ", text.lower()).strip() == "a b c"


def test_union_find_transitive_components():
    forest = UnionFind()
    for a, b in [("A", "B"), ("B", "C"), ("D", "E"), ("F", "F")]:
        forest.union(a, b)
    assert sorted(sorted(c) for c in forest.components()) == [["A", "B", "C"], ["D", "E"], ["F"]]
    assert forest.find("A") == forest.find("C") != forest.find("D")


@pytest.mark.parametrize("seed", range(6))
def test_component_labels_are_union_finds_components_labelled_by_their_smallest_node(seed):
    pairs = random_graph(seed)
    found, labels = component_labels(pairs)
    expected = smallest_in_component(pairs)
    assert found.tolist() == sorted(expected)
    assert {int(n): int(found[label]) for n, label in zip(found, labels)} == expected


@pytest.mark.parametrize("seed", range(3))
def test_unique_pairs_equals_numpys_row_unique(seed):
    rng = np.random.default_rng(seed)
    shards, rows = rng.integers(0, 5, 6000).astype(np.uint64), rng.integers(0, 900, 6000).astype(np.uint64)
    pairs = ((shards << np.uint64(32)) | rows).reshape(-1, 2)
    top = np.array([[2**64 - 1, 0]], dtype=np.uint64)
    pairs = np.concatenate([pairs, pairs[:1000], pairs[:300, ::-1], top])
    found = unique_pairs(pairs[rng.permutation(len(pairs))])
    assert found.dtype == np.uint64 and np.array_equal(found, np.unique(pairs, axis=0))
    assert unique_pairs(np.zeros((0, 2), dtype=np.uint64)).shape == (0, 2)


def test_priority_order_source_then_quality_then_length_then_id():
    priority = ["wikipedia", "books"]

    def doc(i, dataset, quality, length):
        meta = {"dataset": dataset} if dataset else {}
        if quality is not None:
            meta["quality_score"] = quality
        return Document(id=i, text="x" * length, meta=meta)

    docs = [
        doc("cc-long", "cc", 0.99, 900),       # unlisted dataset ranks last whatever its quality
        doc("books-hq", "books", 0.9, 100),
        doc("books-lq-long", "books", 0.2, 500),
        doc("books-noq", "books", None, 999),  # no quality_score: after those with one
        doc("wiki-b", "wikipedia", 0.5, 300),
        doc("wiki-a", "wikipedia", 0.5, 300),  # tie on everything but id
        doc("wiki-long", "wikipedia", 0.5, 301),
    ]
    rows = [priority_fields(d, priority, "dataset") for d in docs]
    records = priority_array(rows, np.arange(len(docs), dtype=np.uint64))
    order = [docs[i].id for i in best_first(records)]
    assert order == ["wiki-long", "wiki-a", "wiki-b", "books-hq", "books-lq-long", "books-noq", "cc-long"]
    names = ("share", "rank", "quality", "length", "id", "language")
    table = {"keys": records["key"], **{name: records[name] for name in names}}
    member = np.arange(len(docs)) % 2 == 0  # as read back from a shard table: the same records
    assert stored_priorities(table, member).tobytes() == priority_array(
        [r for r, m in zip(rows, member) if m], records["key"][member]).tobytes()
    assert math.isnan(priority_fields(Document("q", "t", {"quality_score": "high"}), [], "dataset")[2])


# ---- exact dedup stage -----------------------------------------------------------------------

def test_exact_dedup_across_shards_keeps_priority(tmp_path):
    shards = [
        [Document("a1", "The same text.", {"dataset": "cc"}),
         Document("u1", "Unique one.", {"dataset": "cc"})],
        [Document("a2", "the   SAME text.\n", {"dataset": "wiki"}),
         Document("a3", "The same text.", {"dataset": "cc", "quality_score": 0.9}),
         Document("u2", "The same text!", {"dataset": "cc"})],
    ]
    stage = build_stage("exact_dedup", {"priority": ["wiki", "cc"], "partitions": 3})
    outputs = stage.run(write_shards(tmp_path, shards), tmp_path / "out", SERIAL)
    assert kept_ids(outputs) == ["a2", "u1", "u2"]
    assert [p.name for p in outputs] == ["shard0.jsonl.zst", "shard1.jsonl.zst"]
    assert stage.counters["dropped:duplicate"] == 2 and stage.counters["duplicate_groups"] == 1
    assert_accounting(stage)
    assert not (tmp_path / "out" / "_work_exact_dedup").exists()
    records = {r["id"]: r for path in outputs if log_path(path).exists() for r in read_log(log_path(path))}
    assert {i: (r["kept"], r["similarity"]) for i, r in records.items()} == {"a1": ("a2", 1.0), "a3": ("a2", 1.0)}


def test_exact_dedup_keeps_the_wanted_language_first(tmp_path):
    docs = [Document("a-translated", "Same words here", {"language": "en", "language_share": 0.91}),
            Document("b-english", "same words  here", {"language": "en", "language_share": 1.0})]
    stage = ExactDedup()
    assert kept_ids(stage.run(write_shards(tmp_path, [docs]), tmp_path / "out", SERIAL)) == ["b-english"]
    assert stage.counters["duplicates_of_language:en"] == 1


def test_exact_dedup_dataset_scope_keeps_cross_dataset_copies(tmp_path):
    docs = [Document("a", "copy", {"dataset": "x"}), Document("b", "copy", {"dataset": "y"}),
            Document("c", "copy", {"dataset": "y"})]
    inputs = write_shards(tmp_path, [docs])
    stage = ExactDedup(scope="dataset")
    assert kept_ids(stage.run(inputs, tmp_path / "o1", SERIAL)) == ["a", "b"]
    stage = ExactDedup(scope="global")
    assert kept_ids(stage.run(inputs, tmp_path / "o2", SERIAL)) == ["a"]


def test_bad_parameters_are_named():
    with pytest.raises(Exception, match="scope"):
        build_stage("exact_dedup", {"scope": "everything"})
    with pytest.raises(Exception, match="threshold"):
        build_stage("fuzzy_dedup", {"threshold": 1.5})
    with pytest.raises(Exception, match="bands"):
        build_stage("fuzzy_dedup", {"bands": 7})
    with pytest.raises(Exception, match="unknown parameter"):
        build_stage("fuzzy_dedup", {"hashes": 7})


# ---- fuzzy dedup stage -----------------------------------------------------------------------

def planted_corpus(seed: int = 0):
    """40 unrelated documents plus 5 near-copies of 5 of them, spread over 3 shards."""
    rng = random.Random(seed)
    originals = [Document(f"orig{i:02d}", random_text(rng), {"dataset": "cc"}) for i in range(40)]
    copies = [Document(f"copy{i:02d}", edit_words(rng, originals[i].text, 4), {"dataset": "cc"})
              for i in range(0, 25, 5)]
    docs = originals + copies
    rng.shuffle(docs)
    return [docs[0:15], docs[15:30], docs[30:]]


def test_fuzzy_dedup_removes_planted_near_duplicates(tmp_path):
    stage = build_stage("fuzzy_dedup", {"partitions": 4})
    outputs = stage.run(write_shards(tmp_path, planted_corpus()), tmp_path / "out", SERIAL)
    kept = kept_ids(outputs)
    assert len(kept) == 40
    for i in range(0, 25, 5):
        assert (f"orig{i:02d}" in kept) != (f"copy{i:02d}" in kept)
    c = stage.counters
    assert c["dropped:duplicate"] == 5 and c["components"] == 5 and c["verified_pairs"] == 5
    assert c["candidates"] >= 5 and c["hist:cluster_size:02"] == 5
    assert_accounting(stage)


def test_fuzzy_partitions_do_not_change_result(tmp_path):
    inputs = write_shards(tmp_path, planted_corpus(seed=4))
    results = []
    for parts in (1, 7):
        stage = FuzzyDedup(partitions=parts)
        results.append((kept_ids(stage.run(inputs, tmp_path / f"out{parts}", SERIAL)),
                        stage.counters["candidates"], stage.counters["dropped:duplicate"]))
    assert results[0] == results[1]


def test_fuzzy_verify_tasks_are_a_multiple_of_the_workers(tmp_path, monkeypatch):
    rng = random.Random(8)
    text = random_text(rng, 250)
    docs = [Document(f"d{i}", edit_words(rng, text, 2)) for i in range(8)]  # 28 candidate pairs
    inputs = write_shards(tmp_path, [docs[:4], docs[4:]])
    monkeypatch.setattr("trident.curate.dedup.fuzzy._VERIFY_BATCH", 10)
    found = {}
    for workers in (1, 2, 3):
        executor, stage = RecordingExecutor(workers), FuzzyDedup(bands=20, partitions=2)
        found[workers] = kept_ids(stage.run(inputs, tmp_path / f"out{workers}", executor))
        assert stage.counters["candidates"] == 28
        executor.close()
        found[workers, "tasks"] = len(executor.returned["fuzzy_dedup: verify"])
    # 3 tasks of 10 on one worker; on two, 4 smaller ones (3 left one worker to verify the last alone).
    assert (found[1, "tasks"], found[2, "tasks"], found[3, "tasks"]) == (3, 4, 3)
    assert found[1] == found[2] == found[3] and len(found[1]) == 1  # one of the 8 near-copies kept


def test_verified_similarities_are_the_true_jaccard_of_every_candidate_pair(tmp_path, monkeypatch):
    """Verification gathers the candidates' stored texts across shards, in pieces: each pair at or
    above the threshold gets the Jaccard of the two documents' shingle sets, whatever the piece size;
    a pair below it gets a value between its Jaccard and the threshold (its comparison may stop early)."""
    import trident.curate.dedup.fuzzy as fuzzy
    from trident.curate.dedup.keys import split_keys

    rng = random.Random(12)
    base = [random_text(rng, 120) + " café “naïve” — résumé" for _ in range(3)]
    shards = [[edit_words(rng, base[i % 3], rng.randrange(1, 6)) for i in range(n)] for n in (7, 4, 7)]
    inputs = write_shards(tmp_path, [[Document(f"d{k}_{r}", t) for r, t in enumerate(part)]
                                     for k, part in enumerate(shards)])
    verify, seen = fuzzy._verify_task, []

    def recorded(job):
        seen.append((job["pairs"], verify(job)[0]))
        return seen[-1][1], 0

    monkeypatch.setattr(fuzzy, "_verify_task", recorded)
    for piece_bytes in (1, 3_000, 1 << 21):  # a pair per piece, a few documents per piece, one piece
        monkeypatch.setattr(fuzzy, "_VERIFY_BYTES", piece_bytes)
        seen.clear()
        stage = FuzzyDedup(bands=20, partitions=2, threshold=0.85, screen_margin=None)  # every candidate compared
        stage.run(inputs, tmp_path / f"out{piece_bytes}", SERIAL)
        pairs, similarity = np.concatenate([p for p, _ in seen]), np.concatenate([v for _, v in seen])
        shard, row = split_keys(pairs.ravel())
        hashes = [shingle_hashes(shards[k][r]) for k, r in zip(shard.tolist(), row.tolist())]
        expected = np.array([jaccard(hashes[2 * i], hashes[2 * i + 1]) for i in range(len(pairs))], dtype=np.float32)
        above = expected >= 0.85
        assert len(pairs) >= 30 and len(set(shard.tolist())) == 3 and 5 <= above.sum() <= len(pairs) - 5
        np.testing.assert_allclose(similarity[above], expected[above], rtol=1e-6)
        assert np.all(similarity[~above] >= expected[~above] - 1e-6) and np.all(similarity[~above] < 0.85)


def test_candidates_far_below_by_their_minhash_estimate_are_not_compared_and_nothing_changes(tmp_path):
    rng = random.Random(13)
    base = [random_text(rng, 150) for _ in range(4)]
    # copies of 4 texts from slightly to heavily edited: candidates from about 0.3 to 0.95 Jaccard
    docs = [Document(f"d{i}_{k}", edit_words(rng, base[i], k * 9)) for i in range(4) for k in range(6)]
    inputs = write_shards(tmp_path, [docs[:12], docs[12:]])
    stages = {margin: FuzzyDedup(bands=20, partitions=2, threshold=0.7, screen_margin=margin) for margin in (0.25, None)}
    kept = {margin: kept_ids(stage.run(inputs, tmp_path / f"out{margin}", SERIAL)) for margin, stage in stages.items()}
    screened, compared = stages[0.25].counters, stages[None].counters
    assert kept[0.25] == kept[None] and screened["verified_pairs"] == compared["verified_pairs"] > 0
    assert 0 < screened["screened_pairs"] < screened["candidates"] == compared["candidates"]
    assert compared["screened_pairs"] == 0
    with pytest.raises(ValueError, match="screen_margin"):
        FuzzyDedup(screen_margin=-0.1)


def test_fuzzy_chain_is_one_component(tmp_path):
    rng = random.Random(5)
    a = random_text(rng, 300)
    b = edit_words(rng, a, 0, positions=range(0, 300, 12))
    c = edit_words(rng, b, 0, positions=range(6, 300, 12))
    ha, hb, hc = (shingle_hashes(t) for t in (a, b, c))
    threshold = 0.72
    assert jaccard(ha, hb) >= threshold and jaccard(hb, hc) >= threshold > jaccard(ha, hc)
    docs = [Document("A", a, {"quality_score": 0.1}), Document("B", b, {"quality_score": 0.5}),
            Document("C", c, {"quality_score": 0.9}), Document("Z", random_text(rng, 300))]
    # 20 bands of 5 rows make pairs at J ~ 0.8 candidates with near certainty.
    stage = FuzzyDedup(bands=20, threshold=threshold, partitions=2)
    outputs = stage.run(write_shards(tmp_path, [docs[:2], docs[2:]]), tmp_path / "out", SERIAL)
    assert kept_ids(outputs) == ["C", "Z"]  # one component A~B~C; highest quality kept
    assert stage.counters["components"] == 1 and stage.counters["hist:cluster_size:03"] == 1
    assert stage.counters["verified_pairs"] == 2
    assert_accounting(stage)


def test_fuzzy_priority_and_dataset_scope(tmp_path):
    rng = random.Random(6)
    text = random_text(rng, 250)
    docs = [Document("cc", text + " more words at the end", {"dataset": "cc", "quality_score": 0.99}),
            Document("books", edit_words(rng, text, 2), {"dataset": "books", "quality_score": 0.1}),
            Document("wiki", edit_words(rng, text, 2), {"dataset": "wiki"}),
            Document("wiki2", edit_words(rng, text, 3), {"dataset": "wiki", "quality_score": 0.3})]
    inputs = write_shards(tmp_path, [docs[:2], docs[2:]])
    across = FuzzyDedup(priority=["wiki", "books"], scope="global")
    assert kept_ids(across.run(inputs, tmp_path / "g", SERIAL)) == ["wiki2"]
    within = FuzzyDedup(priority=["wiki", "books"], scope="dataset")
    assert kept_ids(within.run(inputs, tmp_path / "d", SERIAL)) == ["books", "cc", "wiki2"]
    assert within.counters["dropped:duplicate"] == 1
    assert_accounting(across), assert_accounting(within)


def test_fuzzy_empty_documents_and_empty_input(tmp_path):
    docs = [Document("e1", ""), Document("e2", "   "), Document("x", "some text here")]
    stage = FuzzyDedup()
    outputs = stage.run(write_shards(tmp_path, [docs, []]), tmp_path / "out", SERIAL)
    assert kept_ids(outputs) == ["e1", "e2", "x"]  # no shingles: never fuzzy duplicates
    assert stage.counters["no_shingles"] == 2 and stage.counters["candidates"] == 0
    assert_accounting(stage)


def test_no_input_shards(tmp_path):
    for stage in (ExactDedup(), FuzzyDedup()):
        assert stage.run([], tmp_path / stage.name, SERIAL) == []
        assert stage.counters["in"] == stage.counters["out"] == 0


@pytest.mark.timeout(120)
def test_fuzzy_same_result_with_worker_processes(tmp_path):
    inputs = write_shards(tmp_path, planted_corpus(seed=9))
    serial = FuzzyDedup(partitions=3)
    parallel = FuzzyDedup(partitions=3)
    a = kept_ids(serial.run(inputs, tmp_path / "s", SERIAL))
    b = kept_ids(parallel.run(inputs, tmp_path / "p", LocalExecutor(2, progress=False)))
    assert a == b and len(a) == 40
    assert serial.counters == parallel.counters


@pytest.mark.parametrize("tasks", [1, 2, 3, 7])
def test_verification_tasks_cover_every_pair_once_with_about_equal_text(tasks):
    """Candidate pairs are cut into runs by the bytes their documents hold, not by their count."""
    from trident.curate.dedup.fuzzy import _equal_cost_bounds

    cost = np.array(random.Random(tasks).choices([100, 4_000], weights=[4, 1], k=500))
    bounds = _equal_cost_bounds(cost, tasks)
    assert bounds[0] == 0 and bounds[-1] == len(cost) and np.all(np.diff(bounds) > 0)
    assert len(bounds) - 1 == tasks
    shares = [cost[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])]
    assert max(shares) <= cost.sum() / tasks + cost.max()
