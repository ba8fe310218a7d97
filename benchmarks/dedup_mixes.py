"""Fuzzy dedup end to end, one process each, start-up included: `trident curate` with only the
fuzzy_dedup stage against a datasketch script, on several document-size mixes and duplicate rates.

Corpus per case: unique paragraph documents (words drawn Zipf-like from the English of Python's
language reference, a tail of pseudo-words, about 1 in 40 words with non-ASCII punctuation or
accents: "“quoted”", "—", "café"), of a size mix (bytes, log-uniform): small 0.5-1 KB, web
0.5-5 KB, long 3-5 KB (the project's own mixes, 10,000 documents each at the default --docs); and
corpora of other shapes: mixed 50 B-20 KB (14,000 documents), tiny 100-300 B (50,000), huge
50-200 KB (200), and web with 60 % near-copies (CASES: document counts scale with --docs); then
`rate` of the corpus replaced by near-copies (3-8% of the words replaced, inserted or deleted; some
re-cased or re-spaced). Four JSONL.zst shards, documents shuffled.
Settings (MT-NLG as in issue 33): char 5-grams, 100 hashes, 20 bands of 5 rows, Jaccard >= 0.7.

- trident: `python -m trident curate CONFIG --input DIR --out OUT workers=W` (stages: fuzzy_dedup
  only), a fresh process. As any run after the first finds it: one untimed warm-up run builds the
  compiled kernels (trident.curate.dedup.kernels.build; numba's JIT cache where no C compiler is found), and
  trident's bytecode is compiled first (as pip does; PYTHONDONTWRITEBYTECODE on this machine
  would otherwise leave every process compiling trident from source).
- datasketch: a fresh `python benchmarks/dedup_mixes.py --datasketch IN OUT` process: MinHash
  (num_perm=100, seed=1; its default sha1 hash) over the same shingles (shingles.shingles),
  and again with its fastest documented setting, `MinHash(hashfunc=xxhash.xxh32_intdigest)`
  (`--xxh32`; 2-3x faster, the same drops: "datasketch+xxh32"),
  MinHashLSH(params=(20, 5)), the usual one pass: a document whose query finds a kept document is
  dropped, otherwise inserted and its raw line written. No verification.
Both read the same shards and write the kept lines as JSONL.zst. Figures: wall seconds and CPU
seconds (the child's user + system, from getrusage) of each process, best of `--rounds` (methods
alternate), docs/s, the ratio trident / datasketch (of the best runs, and the median and range of
each round's own ratio), and trident's 1 -> 2 worker wall speed-up
and CPU ratio (own runs, alternating) on the same corpus and on one 4x its size (same mix and rate:
a run's start-up, ~0.5 s the same for both, is most of what 2 workers cannot split in a 2-7 s run),
beside this machine's ceiling measured before and after: two pure-Python loops in two processes
against one (benchmarks/common.py two_process_ceiling).
Quality: planted copies dropped (recall) and documents dropped that are not planted copies of
one another (a kept original counts as right).

    python benchmarks/dedup_mixes.py [--quick] [--docs N] [--rounds N] [--cases NAME ...]
                                     [--workers-docs [N ...]] [--workers-only]
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import itertools
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANDS, ROWS, THRESHOLD = 20, 5, 0.7
MIXES = {"small": (500, 1000), "web": (500, 5000), "long": (3000, 5000),
         "mixed": (50, 20_000), "tiny": (100, 300), "huge": (50_000, 200_000)}
# (mix, duplicate rate, documents at --docs 10000: scaled with --docs). The first five are the project's
# own mixes; the others are corpora of other shapes: mixed lengths, many very short documents, a few
# very long ones, a high duplicate rate.
CASES = [("small", 0.05, 10_000), ("web", 0.05, 10_000), ("web", 0.15, 10_000), ("web", 0.30, 10_000),
         ("long", 0.15, 10_000), ("mixed", 0.05, 14_000), ("tiny", 0.05, 50_000), ("huge", 0.15, 200),
         ("web", 0.60, 10_000)]
EXOTIC = ["“quoted”", "—", "café", "naïve", "’s", "…", "résumé"]
CONFIG = f"""executor: local
workers: 1
progress: false
stages:
  - stage: fuzzy_dedup
    num_hashes: 100
    bands: {BANDS}
    ngram: 5
    shingle: char
    threshold: {THRESHOLD}
"""


# ---- corpus ----------------------------------------------------------------------------------------
def vocabulary(rng: random.Random, tail: int = 30_000) -> tuple[list[str], list[float]]:
    from pydoc_data.topics import topics

    counts: dict[str, int] = {}
    for word in re.findall(r"[a-z]+", " ".join(topics.values()).lower()):
        counts[word] = counts.get(word, 0) + 1
    words = sorted(counts, key=counts.get, reverse=True)
    seen = set(words)
    while len(words) < len(counts) + tail:
        word = "".join(rng.choice("etaoinshrdlucmfwypvbgkjqxz"[: rng.randint(8, 26)]) for _ in range(rng.randint(3, 10)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    cumulative = list(itertools.accumulate(1.0 / (rank + 10.0) for rank in range(len(words))))
    return words, cumulative


def paragraph_doc(rng: random.Random, vocab, cumulative, size: int) -> str:
    words = rng.choices(vocab, cum_weights=cumulative, k=size // 5)
    for i in range(0, len(words), 40):
        words[min(len(words) - 1, i + rng.randrange(40))] = rng.choice(EXOTIC)
    text, out = " ".join(words), []
    for k, sentence in enumerate(re.findall(r"(?:\S+ ){6,14}", text + " ")):
        out.append(sentence.strip().capitalize() + (".\n\n" if k % 5 == 4 else ". "))
    return "".join(out)[:size].strip()


def near_copy(rng: random.Random, text: str, vocab) -> str:
    words = text.split(" ")
    for _ in range(max(1, int(len(words) * rng.uniform(0.03, 0.08)))):
        i, op = rng.randrange(len(words)), rng.randrange(3)
        if op == 0:
            words[i] = rng.choice(vocab)
        elif op == 1:
            words.insert(i, rng.choice(vocab))
        elif len(words) > 1:
            del words[i]
    copy = " ".join(words)
    return copy.upper() if rng.random() < 0.1 else copy.replace(". ", ".  \n") if rng.random() < 0.1 else copy


def make_corpus(docs: int, mix: str, rate: float, seed: int) -> tuple[list[str], dict[int, int]]:
    """(texts, planted {copy index: original index}) of `docs` documents, `rate` of them near-copies."""
    rng = random.Random(seed)
    vocab, weights = vocabulary(rng)
    lo, hi = MIXES[mix]
    originals = docs - int(docs * rate)
    texts = [paragraph_doc(rng, vocab, weights, int(lo * (hi / lo) ** rng.random())) for _ in range(originals)]
    sources = [rng.randrange(originals) for _ in range(docs - originals)]
    texts += [near_copy(rng, texts[s], vocab) for s in sources]
    order = list(range(docs))
    rng.shuffle(order)
    position = {old: new for new, old in enumerate(order)}
    planted = {position[originals + k]: position[s] for k, s in enumerate(sources)}
    return [texts[i] for i in order], planted


def write_shards(texts: list[str], folder: Path, shards: int = 4) -> None:
    import zstandard

    folder.mkdir(parents=True, exist_ok=True)
    for k in range(shards):
        lines = "".join(json.dumps({"id": f"d{i}", "text": texts[i]}) + "\n" for i in range(k, len(texts), shards))
        (folder / f"part{k}.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(lines.encode()))


# ---- the datasketch process ------------------------------------------------------------------------
def datasketch_dedup(src: Path, out: Path, xxh32: bool = False) -> None:
    """One-pass MinHashLSH dedup of every shard of `src` into `out` (run as its own process); with
    `xxh32`, MinHash's hash is xxhash.xxh32_intdigest instead of its default sha1."""
    import datasketch
    import xxhash
    import zstandard

    from trident.curate.dedup.shingles import shingles

    lsh = datasketch.MinHashLSH(num_perm=100, params=(BANDS, ROWS))
    hashing = {"hashfunc": xxhash.xxh32_intdigest} if xxh32 else {}
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("*.jsonl.zst")):
        with open(path, "rb") as fh, open(out / path.name, "wb") as dst, \
                zstandard.ZstdCompressor(level=3).stream_writer(dst) as writer:
            for line in io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)):
                record = json.loads(line)
                sketch = datasketch.MinHash(num_perm=100, seed=1, **hashing)
                sketch.update_batch([s.encode("utf-8") for s in shingles(record["text"], 5)])
                if lsh.query(sketch):
                    continue
                lsh.insert(record["id"], sketch)
                writer.write(line)


# ---- measurement -----------------------------------------------------------------------------------
def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one child process run to completion."""
    from common import timed_processes  # here: the datasketch child process runs this file without trident

    return timed_processes(cmd)


def kept_ids(folder: Path) -> set[str]:
    import zstandard

    ids = set()
    for path in folder.glob("*.jsonl.zst"):
        for line in zstandard.ZstdDecompressor().stream_reader(path.read_bytes(), read_across_frames=True).readall().splitlines():
            if line.strip():
                ids.add(json.loads(line)["id"])
    return ids


def quality(kept: set[str], planted: dict[int, int], docs: int) -> dict:
    dropped = {i for i in range(docs) if f"d{i}" not in kept}
    found = sum(1 for copy, original in planted.items() if copy in dropped or original in dropped)
    groups = {i: i for i in range(docs)}
    for copy, original in planted.items():
        groups[copy] = original
    # A drop is wrong when nothing else of its planted group (original and its copies) was kept.
    kept_groups = {groups[i] for i in range(docs) if i not in dropped}
    wrong = sum(1 for i in dropped if groups[i] not in kept_groups)
    return {"dropped": len(dropped), "recall": found / max(1, len(planted)), "wrong_drops": wrong}


def case_name(mix: str, rate: float) -> str:
    """A case's name for --cases: its mix and duplicate percentage (web30)."""
    return f"{mix}{round(rate * 100)}"


def run_case(work: Path, docs: int, mix: str, rate: float, rounds: int, workers_docs: list[int]) -> dict:
    texts, planted = make_corpus(docs, mix, rate, seed=zlib.crc32(f"{mix}{rate}".encode()))
    src = work / "in"
    write_shards(texts, src)
    config = work / "fuzzy.yaml"
    config.write_text(CONFIG)
    commands = {"trident": lambda out: trident_command(config, src, out, 1),
                "datasketch": lambda out: [sys.executable, __file__, "--datasketch", str(src), str(out)],
                "datasketch+xxh32": lambda out: [sys.executable, __file__, "--datasketch", str(src), str(out), "--xxh32"]}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for r in range(rounds):
        for name in (list(commands) if r % 2 == 0 else list(commands)[::-1]):
            shutil.rmtree(work / f"out_{name}", ignore_errors=True)  # a fresh output folder, not timed
            runs[name].append(timed(commands[name](work / f"out_{name}")))
    best = {name: min(times) for name, times in runs.items()}
    # Each round's own ratio (its two runs are next to each other): their median and spread say how
    # much a slow spell of this shared machine moved the best-of figure.
    paired = sorted(d[0] / t[0] for t, d in zip(runs["trident"], runs["datasketch"]))
    row = {"mix": mix, "rate": rate, "docs": docs, "mb": sum(len(t.encode()) for t in texts) / 1e6,
           "trident_wall_s": best["trident"][0], "trident_cpu_s": best["trident"][1],
           "datasketch_wall_s": best["datasketch"][0], "datasketch_cpu_s": best["datasketch"][1],
           "speedup_wall": best["datasketch"][0] / best["trident"][0],
           "speedup_cpu": best["datasketch"][1] / best["trident"][1],
           "rounds_median": paired[len(paired) // 2], "rounds_min": paired[0], "rounds_max": paired[-1]}
    row["trident_docs_per_s"] = docs / best["trident"][0]
    row["datasketch_docs_per_s"] = docs / best["datasketch"][0]
    row["xxh32_wall_s"], row["xxh32_cpu_s"] = best["datasketch+xxh32"]
    row["speedup_wall_xxh32"] = best["datasketch+xxh32"][0] / best["trident"][0]
    row["speedup_cpu_xxh32"] = best["datasketch+xxh32"][1] / best["trident"][1]
    paired_xxh32 = sorted(d[0] / t[0] for t, d in zip(runs["trident"], runs["datasketch+xxh32"]))
    row["rounds_median_xxh32"] = paired_xxh32[len(paired_xxh32) // 2]
    row["trident_quality"] = quality(kept_ids(work / "out_trident"), planted, docs)
    row["datasketch_quality"] = quality(kept_ids(work / "out_datasketch"), planted, docs)
    row["xxh32_quality"] = quality(kept_ids(work / "out_datasketch+xxh32"), planted, docs)
    row["workers"] = run_workers(work, config, mix, rate, rounds, workers_docs, {docs: src})
    return row


def run_workers(work: Path, config: Path, mix: str, rate: float, rounds: int, sizes: list[int],
                corpora: dict[int, Path] | None = None) -> list[dict]:
    """1 -> 2 worker runs on a corpus of each size of this mix (one in ``corpora`` is reused)."""
    found = []
    for size in sizes:
        src = (corpora or {}).get(size)
        if src is None:
            src = work / f"in_{size}"
            write_shards(make_corpus(size, mix, rate, seed=zlib.crc32(f"{mix}{rate}{size}".encode()))[0], src)
        found.append({"docs": size, **workers_speedup(work / f"w{size}", config, src, rounds)})
        shutil.rmtree(work / f"in_{size}", ignore_errors=True)
    return found


def trident_command(config: Path, src: Path, out: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "trident", "curate", str(config), "--input", str(src), "--out", str(out),
            f"workers={workers}"]


def workers_speedup(work: Path, config: Path, src: Path, rounds: int) -> dict:
    """trident's 1 -> 2 worker wall speed-up and CPU ratio on `src` (1 and 2 workers alternating, so
    both see the same machine; best of `rounds` each, and the median of each round's own ratio, which
    a slow spell of this shared machine during one round moves less); exits if the kept documents differ."""
    runs: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for r in range(rounds):
        for w in ((2, 1) if r % 2 == 0 else (1, 2)):
            shutil.rmtree(work / f"out_{w}w", ignore_errors=True)
            runs[w].append(timed(trident_command(config, src, work / f"out_{w}w", w)))
    if kept_ids(work / "out_2w") != kept_ids(work / "out_1w"):
        raise SystemExit(f"{src}: 2 workers kept other documents than 1 worker")
    shutil.rmtree(work, ignore_errors=True)
    best = {w: min(runs[w]) for w in runs}
    paired = sorted(one[0] / two[0] for one, two in zip(runs[1], runs[2]))
    return {"wall_1w_s": best[1][0], "wall_2w_s": best[2][0], "speedup": best[1][0] / best[2][0],
            "paired_median": paired[len(paired) // 2], "cpu_2w_over_1w": best[2][1] / best[1][1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasketch", nargs=2, metavar=("IN", "OUT"), help="(internal) the datasketch process")
    parser.add_argument("--xxh32", action="store_true", help="(internal) the datasketch process with xxh32")
    parser.add_argument("--quick", action="store_true", help="2,000 documents per case, 1 round")
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers-docs", type=int, nargs="*", default=None,
                        help="corpus sizes of the 1 -> 2 worker runs (default: --docs and 4x --docs; none: skip)")
    parser.add_argument("--cases", nargs="+", default=None,
                        help="only these cases, named mix and percent duplicates: small5 web5 web15 web30 long15 "
                             "mixed5 tiny5 huge15 web60 (default: all)")
    parser.add_argument("--workers-only", action="store_true",
                        help="only the 1 -> 2 worker runs (no datasketch comparison, no --docs corpus)")
    args = parser.parse_args()
    if args.datasketch:
        return datasketch_dedup(Path(args.datasketch[0]), Path(args.datasketch[1]), args.xxh32)
    from common import emit_json, load_average, print_table, two_process_ceiling  # not in the datasketch process

    if importlib.util.find_spec("datasketch") is None:
        sys.exit("benchmarks/dedup_mixes.py compares against datasketch, which is not installed: pip install -e .[bench]")
    docs, rounds = (2000, 1) if args.quick else (args.docs, args.rounds)
    cases = [c for c in CASES if args.cases is None or case_name(c[0], c[1]) in args.cases]
    if not cases:
        sys.exit(f"--cases: none of {args.cases} is a case; the cases are {[case_name(c[0], c[1]) for c in CASES]}")
    sizes = [docs, 4 * docs] if args.workers_docs is None else args.workers_docs
    load_before, rows = load_average(), []
    ceiling = [two_process_ceiling()] if sizes else []
    # As after an install: trident's bytecode compiled (pip does it; this machine's
    # PYTHONDONTWRITEBYTECODE would leave trident alone to compile from source in every process).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "trident")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm"
        run_case(warm, 200, "small", 0.1, 1, [])  # the kernels are built (or numba's cache filled) once
        (Path(tmp) / "fuzzy.yaml").write_text(CONFIG)
        for mix, rate, base in cases:
            scaled = [max(1, size * base // 10_000) for size in sizes]  # sizes are those of a 10,000-doc case
            if args.workers_only:
                rows.append({"mix": mix, "rate": rate, "workers": run_workers(
                    Path(tmp) / f"{mix}{rate}", Path(tmp) / "fuzzy.yaml", mix, rate, rounds, scaled)})
            else:
                rows.append(run_case(Path(tmp) / f"{mix}{rate}", max(1, docs * base // 10_000), mix, rate,
                                     rounds, scaled))
    ceiling += [two_process_ceiling()] if sizes else []
    if not args.workers_only:
        print_table("fuzzy dedup end to end (one process each, start-up included; char 5-grams, 100 hashes, 20x5, J>=0.7)",
                    ["mix", "dup rate", "docs", "MB", "trident s", "datasketch s", "datasketch+xxh32 s",
                     "trident docs/s", "datasketch docs/s", "x wall", "x CPU", "x wall of rounds: median (min-max)",
                     "x wall xxh32", "x CPU xxh32", "x wall xxh32, rounds median", "recall t/d/x", "wrong drops t/d/x"],
                    [[r["mix"], r["rate"], r["docs"], round(r["mb"], 1), round(r["trident_wall_s"], 2),
                      round(r["datasketch_wall_s"], 2), round(r["xxh32_wall_s"], 2), round(r["trident_docs_per_s"]),
                      round(r["datasketch_docs_per_s"]), round(r["speedup_wall"], 1), round(r["speedup_cpu"], 1),
                      f"{r['rounds_median']:.1f} ({r['rounds_min']:.1f}-{r['rounds_max']:.1f})",
                      round(r["speedup_wall_xxh32"], 1), round(r["speedup_cpu_xxh32"], 1),
                      round(r["rounds_median_xxh32"], 1),
                      f"{r['trident_quality']['recall']:.3f}/{r['datasketch_quality']['recall']:.3f}/"
                      f"{r['xxh32_quality']['recall']:.3f}",
                      f"{r['trident_quality']['wrong_drops']}/{r['datasketch_quality']['wrong_drops']}/"
                      f"{r['xxh32_quality']['wrong_drops']}"] for r in rows])
    if sizes:
        print_table("trident 1 -> 2 workers (best wall of each, alternating; kept documents identical)",
                    ["mix", "dup rate", "docs", "1 worker s", "2 workers s", "1->2 workers", "median of rounds",
                     "CPU 2w/1w"],
                    [[r["mix"], r["rate"], w["docs"], round(w["wall_1w_s"], 2), round(w["wall_2w_s"], 2),
                      round(w["speedup"], 2), round(w["paired_median"], 2), round(w["cpu_2w_over_1w"], 2)] for r in rows for w in r["workers"]])
        for k in range(len(sizes)):  # the k-th corpus size of each case (scaled by the case's document count)
            got = [r["workers"][k]["speedup"] for r in rows]
            print(f"1 -> 2 workers on the cases' corpora of {sizes[k]:,} (scaled) documents: "
                  f"{min(got):.2f}-{max(got):.2f}x")
        print(f"this machine's ceiling, two pure-Python loops in two processes over one: "
              f"{' / '.join(str(c['throughput']) for c in ceiling)}x (before / after; CPU per step "
              f"{' / '.join(str(c['cpu_per_step']) for c in ceiling)})")
    print(f"load average before {load_before['load_1m']}, after {load_average()['load_1m']}")
    emit_json("dedup_mixes", {"cases": rows, "ceiling": ceiling, "load_before": load_before, "load_after": load_average()})


if __name__ == "__main__":
    main()
