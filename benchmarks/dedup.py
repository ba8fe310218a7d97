"""Fuzzy dedup: trident's MinHash + LSH against datasketch on planted near-duplicates, one core.

Corpus: `--docs` unrelated documents (words drawn Zipf-like from the English of Python's language
reference, pydoc_data.topics, then a tail of pseudo-words) plus, for each Jaccard level 0.50, 0.55,
..., 0.95, `--pairs` copies of other documents edited (word substitutions, insertions, deletions)
up to the most edits that keep their char-5-gram Jaccard with the original >= the level.
Ground truth: the exact Jaccard of the char-5-gram shingle sets of EVERY pair of documents (the text
is ASCII, lower-case, single-spaced, so trident's normalisation leaves it unchanged; a shingle is
its 5 bytes packed into an integer, so sets are exact; intersections by a dense matmul over
frequent shingles plus a sparse product over the rest). Accidental near-duplicates count too.

1. Speed, texts -> candidate pairs (shingles, 100 permutations, LSH b x r, buckets -> pairs):
   trident MinHasher.signatures + band_keys + bucket_pairs; datasketch MinHash.update_batch over
   the same distinct shingles (its default sha1 hash, and xxh32) + MinHashLSH(params=(b, r))
   insert + query. One BLAS/OpenMP thread; methods alternate (forward, then reversed order, each
   round); median CPU seconds of this process over the rounds (wall time is printed too).
2. Quality on the whole corpus for 10 x 10 (MT-NLG default) and 20 x 5: candidate recall per exact
   Jaccard bin; for T in (0.7, 0.8): recall of all pairs with J >= T, and precision of the pairs
   reported as duplicates after verification (candidate kept when its verified Jaccard >= T;
   trident verifies with minhash.jaccard of its xxh64 shingle hashes, as fuzzy_dedup does;
   datasketch pairs with the exact sets) and, for comparison, with the MinHash estimate instead.
3. The fuzzy_dedup stage end to end against datasketch (sha1, and xxh32: its fastest documented
   setting) and rensa (benchmarks/dedup_end_to_end.py):
   `--e2e-docs` unrelated documents of 170-480 words (1-3 KB) plus 10% planted copies, 4 JSONL.zst
   shards in and out, one process; best CPU seconds of `--e2e-rounds` interleaved rounds, trident's
   seconds per part, recall of planted J >= 0.8 pairs and drops with no J >= 0.7 partner.
4. The whole curate-cc pipeline per core: runs benchmarks/curate_pipeline.py and reports its figures.

    python benchmarks/dedup.py [--quick] [--docs N] [--pairs N] [--speed-docs N] [--rounds N]
                               [--e2e-docs N] [--e2e-rounds N] [--e2e-bands B] [--end-to-end-only]
Needs `pip install -e .[bench]` (datasketch and rensa, benchmark-only dependencies).
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one core: set before numpy loads its BLAS

import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sparse  # noqa: E402

from common import Timer, emit_json, load_average, median, print_table  # noqa: E402

try:
    import datasketch
except ImportError:
    sys.exit("benchmarks/dedup.py compares against datasketch, which is not installed: pip install -e .[bench]")

import xxhash  # noqa: E402

from trident.curate.dedup.minhash import MinHasher, bucket_pairs, estimate_jaccard, jaccard  # noqa: E402
from trident.curate.dedup.shingles import shingles

LEVELS = [round(0.5 + 0.05 * i, 2) for i in range(10)]
BANDINGS = [(10, 10), (20, 5)]
THRESHOLDS = (0.7, 0.8)
DENSE_DF = 64  # shingles in >= this many documents go to the dense matmul


# ---- corpus --------------------------------------------------------------------------------------
def vocabulary(rng: np.random.Generator, tail: int = 40_000) -> tuple[list[str], np.ndarray]:
    """Words by rank with Zipf probabilities: the reference's words by frequency, then pseudo-words."""
    from pydoc_data.topics import topics

    counts = collections.Counter(re.findall(r"[a-z]+", " ".join(topics.values()).lower()))
    words = [w for w, _ in counts.most_common()]
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    freq = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.0, 2.0,
                     1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1, 0.1])
    seen = set(words)
    while len(words) < len(counts) + tail:
        word = "".join(rng.choice(letters, size=int(rng.integers(3, 11)), p=freq / freq.sum()))
        if word not in seen:
            seen.add(word)
            words.append(word)
    p = 1.0 / (np.arange(len(words)) + 10.0)
    return words, p / p.sum()


def shingle_codes(text: str) -> np.ndarray:
    """Exact distinct char-5-gram shingles of an ASCII text, each packed into one integer."""
    data = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.uint64)
    n = len(data) - 4
    code = data[:n].copy()
    for k in range(1, 5):
        code |= data[k : k + n] << np.uint64(8 * k)
    return np.unique(code)


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def edited_copy(words: list[str], level: float, rng, vocab, p) -> str:
    """The copy with the most of a fixed random edit sequence applied whose Jaccard stays >= level."""
    ops = rng.integers(0, 3, size=len(words))
    where, fresh = rng.random(len(words)), rng.choice(len(vocab), size=len(words), p=p)
    original = shingle_codes(" ".join(words))

    def apply(k: int) -> str:
        out = list(words)
        for op, at, new in zip(ops[:k], where[:k], fresh[:k]):
            i = int(at * len(out))
            if op == 0:
                out[i] = vocab[new]
            elif op == 1:
                out.insert(i, vocab[new])
            elif len(out) > 1:
                del out[i]
        return " ".join(out)

    lo, hi = 0, len(words)  # invariant: J(apply(lo)) >= level
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if exact_jaccard(original, shingle_codes(apply(mid))) >= level:
            lo = mid
        else:
            hi = mid - 1
    return apply(lo)


def make_corpus(n_docs: int, pairs_per_level: int, seed: int = 0, words: tuple[int, int] = (300, 600)):
    """(texts, planted): `n_docs` originals of `words` words plus the edited copies, shuffled;
    planted lists (original index, copy index, exact Jaccard) of every copy."""
    rng = np.random.default_rng(seed)
    vocab, p = vocabulary(rng)
    originals = [[vocab[i] for i in rng.choice(len(vocab), size=int(rng.integers(*words)), p=p)]
                 for _ in range(n_docs)]
    docs = [" ".join(w) for w in originals]
    sources = rng.permutation(n_docs)[: pairs_per_level * len(LEVELS)]  # each original copied once at most
    pairs = []
    for k, source in enumerate(sources.tolist()):
        docs.append(edited_copy(originals[source], LEVELS[k // pairs_per_level], rng, vocab, p))
        pairs.append((source, len(docs) - 1))
    order = rng.permutation(len(docs))
    position = np.argsort(order)
    planted = [(int(position[a]), int(position[b]), exact_jaccard(shingle_codes(docs[a]), shingle_codes(docs[b])))
               for a, b in pairs]
    return [docs[i] for i in order], planted


def all_pairs_at_least(codes: list[np.ndarray], threshold: float) -> dict[tuple[int, int], float]:
    """{(i, j): exact Jaccard} for every pair i < j with Jaccard >= threshold."""
    n = len(codes)
    sizes = np.array([c.size for c in codes], dtype=np.float64)
    doc = np.repeat(np.arange(n), sizes.astype(np.int64))
    _, col = np.unique(np.concatenate(codes), return_inverse=True)
    df = np.bincount(col)
    dense = df[col] >= DENSE_DF
    dense_cols = np.flatnonzero(df >= DENSE_DF)
    index = np.full(len(df), -1)
    index[dense_cols] = np.arange(len(dense_cols))
    x = np.zeros((n, len(dense_cols)), dtype=np.float32)  # counts stay exact in float32 (< 2**24)
    x[doc[dense], index[col[dense]]] = 1.0
    inter = x @ x.T
    rare = sparse.csr_matrix((np.ones(int((~dense).sum()), np.float32), (doc[~dense], col[~dense])),
                             shape=(n, len(df)))
    inter += (rare @ rare.T.tocsr()).toarray()
    sim = inter / (sizes[:, None] + sizes[None, :] - inter)
    i, j = np.nonzero(np.triu(sim >= threshold, k=1))
    return {(int(a), int(b)): float(sim[a, b]) for a, b in zip(i, j)}


# ---- the two implementations: texts -> candidate pairs -------------------------------------------
def trident_candidates(hasher: MinHasher, texts: list[str]) -> set[tuple[int, int]]:
    keys = hasher.band_keys(hasher.signatures(texts))
    n, bands = keys.shape
    pairs, _ = bucket_pairs(np.tile(np.arange(bands), n), keys.ravel(), np.repeat(np.arange(n, dtype=np.uint64), bands))
    return set(map(tuple, pairs.tolist()))


def datasketch_minhashes(texts: list[str], hashfunc=None) -> list:
    extra = {"hashfunc": hashfunc} if hashfunc else {}
    out = []
    for text in texts:
        m = datasketch.MinHash(num_perm=100, seed=1, **extra)
        m.update_batch([s.encode("utf-8") for s in shingles(text, 5)])
        out.append(m)
    return out


def datasketch_lsh_pairs(minhashes: list, bands: int, rows: int) -> set[tuple[int, int]]:
    lsh = datasketch.MinHashLSH(num_perm=100, params=(bands, rows))
    for i, m in enumerate(minhashes):
        lsh.insert(i, m)
    return {(min(i, j), max(i, j)) for i, m in enumerate(minhashes) for j in lsh.query(m) if j != i}


def datasketch_candidates(texts: list[str], bands: int, rows: int, hashfunc=None) -> set[tuple[int, int]]:
    return datasketch_lsh_pairs(datasketch_minhashes(texts, hashfunc), bands, rows)


# ---- measurements --------------------------------------------------------------------------------
def measure_speed(texts: list[str], rounds: int) -> tuple[list[list], dict]:
    methods = {}
    for bands, rows in BANDINGS:
        hasher = MinHasher(num_hashes=100, bands=bands, ngram=5, unit="char", seed=1)
        methods[f"trident {bands}x{rows}"] = lambda h=hasher: trident_candidates(h, texts)
        methods[f"datasketch {bands}x{rows}"] = lambda b=bands, r=rows: datasketch_candidates(texts, b, r)
    methods["datasketch+xxh32 10x10"] = lambda: datasketch_candidates(texts, 10, 10, xxhash.xxh32_intdigest)
    cpu, wall = collections.defaultdict(list), collections.defaultdict(list)
    names = list(methods)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:  # alternate the order against drift
            with Timer() as timer:
                methods[name]()
            cpu[name].append(timer.cpu)
            wall[name].append(timer.wall)
    megabytes = sum(map(len, texts)) / 1e6
    med = {name: median(cpu[name]) for name in names}
    rows = [[name, len(texts) / med[name], megabytes / med[name], median(wall[name]),
             med[f"datasketch {name.split()[-1]}"] / med[name] if name.startswith("trident") else ""]
            for name in names]
    result = {name: {"docs_per_s": len(texts) / med[name], "cpu_s": cpu[name], "wall_s": wall[name]} for name in names}
    for bands, rows_ in BANDINGS:
        key = f"{bands}x{rows_}"
        result[f"speedup_{key}"] = med[f"datasketch {key}"] / med[f"trident {key}"]
    result["speedup_vs_xxh32_10x10"] = med["datasketch+xxh32 10x10"] / med["trident 10x10"]
    return rows, result


def quality(candidates: set, truth: dict, verify, estimate) -> dict:
    """Candidate recall by Jaccard bin; recall and precision at each threshold (exact and estimate)."""
    out = {"candidates": len(candidates), "bins": {}}
    edges = LEVELS + [1.0001]
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = [pair for pair, j in truth.items() if lo <= j < hi]
        out["bins"][f"{lo:.2f}"] = (sum(pair in candidates for pair in inside), len(inside))
    verified = {pair: verify(*pair) for pair in candidates}
    estimated = {pair: estimate(*pair) for pair in candidates}
    for t in THRESHOLDS:
        positives = {pair for pair, j in truth.items() if j >= t}
        for label, score in (("verified", verified), ("estimate", estimated)):
            reported = {pair for pair, s in score.items() if s >= t}
            hits = len(reported & positives)
            out[f"{label}@{t}"] = {"recall": hits / max(1, len(positives)), "precision": hits / max(1, len(reported)),
                                   "positives": len(positives), "reported": len(reported)}
    return out


def measure_quality(texts: list[str], codes: list[np.ndarray], truth: dict) -> dict:
    results = {}
    sketches = datasketch_minhashes(texts)
    for bands, rows in BANDINGS:
        hasher = MinHasher(num_hashes=100, bands=bands, ngram=5, unit="char", seed=1)
        hashes = [hasher.hashes(t) for t in texts]
        sig = hasher.signatures_from_hashes(hashes)
        results[f"trident {bands}x{rows}"] = quality(
            trident_candidates(hasher, texts), truth, lambda a, b: jaccard(hashes[a], hashes[b]),
            lambda a, b: estimate_jaccard(sig[a], sig[b]))
        results[f"datasketch {bands}x{rows}"] = quality(
            datasketch_lsh_pairs(sketches, bands, rows), truth, lambda a, b: exact_jaccard(codes[a], codes[b]),
            lambda a, b: sketches[a].jaccard(sketches[b]))
    return results


def measure_pipeline(quick: bool) -> dict:
    """benchmarks/curate_pipeline.py (not modified): its final JSON line."""
    script = Path(__file__).resolve().parent / "curate_pipeline.py"
    args = ["--warcs", "1", "--docs", "60"] if quick else []
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([sys.executable, str(script), *args, "--out", out], capture_output=True, text=True,
                             env=os.environ | {"PYTHONPATH": str(script.parent)})
    if run.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{run.stderr[-2000:]}")
    line = [l for l in run.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line) | {"command": f"python benchmarks/curate_pipeline.py {' '.join(args)}".strip()}


def end_to_end(args) -> dict:
    """Section 3: the stage against datasketch (sha1 and xxh32) and rensa on 1-3 KB documents."""
    import dedup_end_to_end

    n_docs = args.e2e_docs or (1000 if args.quick else 10_000)
    texts, planted = make_corpus(n_docs, max(1, n_docs // 100), seed=1, words=(170, 480))
    codes = [shingle_codes(t) for t in texts]
    with tempfile.TemporaryDirectory() as work:
        e2e = dedup_end_to_end.measure(texts, codes, planted, Path(work), args.e2e_bands,
                                       args.e2e_rounds or (1 if args.quick else 3), exact_jaccard)
    title = (f"fuzzy_dedup end to end, {e2e['docs']} docs ({e2e['mb']:.1f} MB, mean {e2e['mb'] * 1e3 / e2e['docs']:.2f} KB) "
             f"in 4 shards, {e2e['bands']} bands x 5 rows, one process, best CPU time of {e2e['rounds']} rounds")
    rows = [[name, e2e[name]["docs_per_s"], e2e[name]["mb_per_s"],
             e2e["speedup_vs_" + name] if name != "trident" else 1.0, e2e[name]["dropped"],
             e2e[name]["recall_planted"], e2e[name]["unjustified_drops"]]
            for name in ("trident", "datasketch", "datasketch+xxh32", "rensa")]
    print_table(title, ["method", "docs/s", "MB/s", "trident speed-up", "dropped",
                        f"recall planted J>=0.8 ({e2e['trident']['planted']})", "drops without a J>=0.7 partner"], rows)
    parts = e2e["trident_parts_s"]
    print_table("trident seconds per part (fastest round)", list(parts), [[parts[k] for k in parts]])
    return e2e


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small corpus, 2 rounds, small pipeline run")
    parser.add_argument("--docs", type=int, default=None, help="unrelated documents (default 1500; quick 300)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="planted pairs per Jaccard level (default 50; quick 10)")
    parser.add_argument("--speed-docs", type=int, default=None, help="documents timed (default 300; quick 120)")
    parser.add_argument("--rounds", type=int, default=None, help="timing rounds (default 3; quick 2)")
    parser.add_argument("--e2e-docs", type=int, default=None, help="end-to-end originals (default 10000; quick 1000)")
    parser.add_argument("--e2e-rounds", type=int, default=None, help="end-to-end rounds (default 3; quick 1)")
    parser.add_argument("--e2e-bands", type=int, default=20, help="LSH bands of the end-to-end run (5 rows each)")
    parser.add_argument("--end-to-end-only", action="store_true", help="only section 3")
    parser.add_argument("--skip-pipeline", action="store_true", help="do not run benchmarks/curate_pipeline.py")
    args = parser.parse_args()
    load_start = load_average()
    if args.end_to_end_only:
        emit_json("dedup", {"end_to_end": end_to_end(args), "machine_at_start": load_start})
        return
    q = args.quick
    n_docs, pairs = args.docs or (300 if q else 1500), args.pairs or (10 if q else 50)
    speed_docs, rounds = args.speed_docs or (120 if q else 300), args.rounds or (2 if q else 3)

    texts, _ = make_corpus(n_docs, pairs)
    codes = [shingle_codes(t) for t in texts]
    truth = all_pairs_at_least(codes, LEVELS[0])
    megabytes = sum(map(len, texts)) / 1e6
    print(f"corpus: {len(texts)} documents, {megabytes:.2f} MB, {len(truth)} pairs with exact Jaccard >= 0.5; "
          f"datasketch {datasketch.__version__}; load {load_start}")

    speed_rows, speed = measure_speed(texts[:speed_docs], rounds)
    print_table(f"Speed, texts -> candidate pairs, {speed_docs} docs, one core, median CPU time of {rounds} rounds",
                ["method", "docs/s", "MB/s", "median wall s", "x datasketch (same bands)"], speed_rows)

    qual = measure_quality(texts, codes, truth)
    rows = [[name, r["candidates"]] + [f"{c}/{n}" for c, n in r["bins"].values()] for name, r in qual.items()]
    bins = list(next(iter(qual.values()))["bins"])
    print_table("Candidate recall by exact Jaccard bin (found/pairs)", ["method", "candidates"] + bins, rows)
    rows = [[name, t, r[f"verified@{t}"]["recall"], r[f"verified@{t}"]["precision"], r[f"estimate@{t}"]["recall"],
             r[f"estimate@{t}"]["precision"], r[f"verified@{t}"]["positives"]]
            for name, r in qual.items() for t in THRESHOLDS]
    print_table("Duplicate pairs (J >= T) against exact ground truth",
                ["method", "T", "recall", "precision (verified)", "recall (estimate)", "precision (estimate)",
                 "true pairs"], rows)

    e2e = end_to_end(args)
    pipeline = None if args.skip_pipeline else measure_pipeline(q)
    if pipeline:
        print(f"\nwhole curate-cc pipeline, one core ({pipeline['command']}): {pipeline['records_per_s']:.1f} "
              f"records/s, {pipeline['html_mb_per_s']:.3f} MB/s of HTML, {pipeline['docs_out']} documents out")
    emit_json("dedup", {"docs": len(texts), "mb": megabytes, "speed_docs": speed_docs, "rounds": rounds,
                        "speed": speed, "quality": qual, "end_to_end": e2e, "pipeline": pipeline,
                        "machine_at_start": load_start})


if __name__ == "__main__":
    main()
