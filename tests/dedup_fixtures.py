"""Fixture corpora for fuzzy dedup's equivalence test, and the stage settings run on them.

The kept ids of each (corpus, settings) case are recorded in tests/fixtures/dedup_kept.json, written by
`python tests/dedup_fixtures.py` with the implementation before the compiled kernels (commit 0bc90cc:
numpy shingle hashing, per-pair Python Jaccard); the test checks today's stage keeps exactly those.
The corpora mix what the kernels must treat as the old code did: ASCII and non-ASCII text (accents,
curly quotes, CJK, emoji, lone combining marks), every kind of Unicode whitespace, texts shorter
than a shingle, empty texts, case and spacing variants, and near-copies edited to Jaccard values
around the thresholds, so verification decides some pairs.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np

from trident.curate.run.executors import LocalExecutor

RECORDED = Path(__file__).parent / "fixtures" / "dedup_kept.json"
SPACES = ["\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2003", "\u2028",
          "\u2029", "\u202f", "\u205f", "\u3000", "  "]
EXTRA_WORDS = ["café", "naïve", "“quoted”", "—", "日本語", "テキスト", "😀", "Straße", "İstanbul", "ǅ", "e\u0301",
               "ΣΊΣΥΦΟΣ", "x\u200by"]

# (name, FuzzyDedup parameters): the MT-NLG banding, word shingles in dataset scope, long char shingles
SETTINGS = {
    "char5_b20": {"bands": 20, "threshold": 0.7, "partitions": 3},
    "word3_dataset": {"shingle": "word", "ngram": 3, "bands": 10, "threshold": 0.5, "scope": "dataset",
                      "priority": ["wiki", "books"], "partitions": 2},
    "char9_b25": {"ngram": 9, "bands": 25, "num_hashes": 100, "threshold": 0.8, "partitions": 4},
}


class UnionFind:
    """The reference for connected components: disjoint sets (path halving, union by size)."""

    def __init__(self) -> None:
        self.parent: dict = {}
        self.size: dict = {}

    def find(self, item):
        parent = self.parent
        if item not in parent:
            parent[item], self.size[item] = item, 1
            return item
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]

    def components(self) -> list[list]:
        """Every set with its members in insertion order."""
        groups: dict = {}
        for item in self.parent:
            groups.setdefault(self.find(item), []).append(item)
        return list(groups.values())


class RecordingExecutor(LocalExecutor):
    """A LocalExecutor that keeps what every map returned, by its progress label."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, progress=False)
        self.returned: dict[str, list] = {}

    def map(self, fn, items, desc=None):
        results = super().map(fn, items, desc)
        self.returned[desc] = results
        return results


def random_graph(seed: int) -> np.ndarray:
    """(k, 2) uint64 edges among 30-300 random 40-bit nodes, with a long descending path (the slow case
    of min-label propagation)."""
    rng = np.random.default_rng(seed)
    nodes = rng.choice(2**40, size=int(rng.integers(30, 300)), replace=False).astype(np.uint64)
    pairs = nodes[rng.integers(0, len(nodes), size=(int(rng.integers(10, 400)), 2))]
    path = np.sort(nodes[:40])[::-1]
    return np.concatenate([pairs, np.stack([path[:-1], path[1:]], axis=1)])


def smallest_in_component(pairs: np.ndarray, min_size: int = 1) -> dict[int, int]:
    """node -> the smallest node of its connected component (of at least ``min_size`` nodes; a
    self-pair makes one of 1), by UnionFind (the reference)."""
    forest = UnionFind()
    for a, b in pairs.tolist():
        forest.union(a, b)
    return {m: min(c) for c in forest.components() if len(c) >= min_size for m in c}


def odd_texts(seed: int = 0) -> list[str]:
    """Every kind of whitespace, multi-byte and case-changing characters, short and empty texts."""
    rng = random.Random(seed)
    alphabet = "ab cD\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f  xyZé’—\x85\xa0\u1680\u2003\u2028\u3000😀İǅß日"
    fixed = ["", " ", "\u3000", "a", "ab", "abcde", " abcde ", "Zé  xx", "ÀB", "x" * 40, "é" * 40, "😀" * 9,
             "\ud800 lone surrogate", "ΟΔΟΣ ΣΑΣ Σ", "İSTANBUL İi", "\u212a elvin \u023a \u1e9e", "𐐀𐐁 DESERET"]
    return fixed + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70))) for _ in range(300)]


def _text(rng: random.Random, vocab: list[str], words: int, exotic: float) -> str:
    out = []
    for _ in range(words):
        out.append(rng.choice(EXTRA_WORDS) if rng.random() < exotic else rng.choice(vocab))
        out.append(rng.choice(SPACES) if rng.random() < 0.05 else " ")
    return "".join(out)


def _edit(rng: random.Random, text: str, fraction: float) -> str:
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, int(len(words) * fraction))):
        words[i] = f"edit{rng.randrange(10**6)}"
    return " ".join(words)


def fixture_documents(seed: int) -> list[tuple[str, str, dict]]:
    """(id, text, meta) of one corpus: ~220 documents, about a third of them near or exact copies."""
    rng = random.Random(seed)
    vocab = [f"{rng.choice('bcdfghklmnprstvw')}{rng.choice('aeiou')}{rng.randrange(400)}" for _ in range(900)]
    docs = []
    for i in range(150):
        exotic = rng.choice([0.0, 0.0, 0.02, 0.2])
        docs.append((f"u{i:03d}", _text(rng, vocab, rng.randint(60, 400), exotic),
                     {"dataset": rng.choice(["wiki", "books", "cc"]), "quality_score": round(rng.random(), 2)}))
    docs += [("short1", "abc", {}), ("short2", "ABC", {}), ("short3", "日本", {}), ("empty", "", {}),
             ("blank", " \u3000\n", {}), ("one_word", "word", {}), ("two_words", "two\xa0WORDS", {})]
    for k in range(60):
        _, base, meta = docs[rng.randrange(150)]
        kind = k % 4
        if kind == 0:  # case and spacing only
            text = base.upper().replace(" ", rng.choice(SPACES))
        else:  # edits around the thresholds
            text = _edit(rng, base, rng.choice([0.02, 0.05, 0.08, 0.12, 0.2, 0.3]))
        docs.append((f"c{k:03d}", text, {**meta, "dataset": rng.choice(["wiki", "books", "cc"])}))
    rng.shuffle(docs)
    return docs


def corpus_shards(seed: int, shards: int = 3) -> list[list[tuple[str, str, dict]]]:
    docs = fixture_documents(seed)
    return [docs[k::shards] for k in range(shards)]


def record(seeds=(0, 1)) -> dict:
    """Run the stage on every (seed, setting) case; {case: sorted kept ids} (what RECORDED holds)."""
    import tempfile

    from trident.curate.document import Document
    from trident.curate.run.executors import LocalExecutor
    from trident.curate.dedup.fuzzy import FuzzyDedup
    from trident.curate.read.shards import read_shard, write_shard

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            paths = []
            for k, part in enumerate(corpus_shards(seed)):
                paths.append(Path(tmp) / f"s{seed}" / f"in{k}.jsonl.zst")
                write_shard(paths[-1], [Document(i, t, m) for i, t, m in part])
            for name, params in SETTINGS.items():
                stage = FuzzyDedup(**params)
                outputs = stage.run(paths, Path(tmp) / f"out{seed}{name}", LocalExecutor(1, progress=False))
                counters = {k: v for k, v in stage.counters.items() if not k.startswith("bytes")}
                out[f"seed{seed}/{name}"] = {"kept": sorted(d.id for p in outputs for d in read_shard(p)),
                                             "counters": dict(sorted(counters.items()))}
    return out


if __name__ == "__main__":
    RECORDED.write_text(json.dumps(record(), indent=1) + "\n")
    print(f"wrote {RECORDED}", file=sys.stderr)
