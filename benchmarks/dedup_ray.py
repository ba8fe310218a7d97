"""Fuzzy or exact dedup on a 2-worker local Ray cluster: the driver's peak memory as the corpus grows 1x -> 8x.

Corpus (written once per scale, before any measured process starts): `--shards` shards of synthetic
documents; scale 8x has 8 times the documents of 1x in the same number of shards.
  - fuzzy (`--stage fuzzy`, default 3,000 docs): 80-word documents, half unrelated and half in
    near-copy clusters of 2..60 members (each member edits up to 4 words of its cluster's text),
    so candidate pairs and verified edges grow with the corpus;
  - exact (`--stage exact`, default 50,000 docs): 12-word documents drawn from docs / 5 distinct
    texts, each copy with random case and spacing, so ~80% are dropped as duplicates.

Each measurement is a fresh driver process (`--child`): it starts `RayExecutor(workers=2)` (a local
Ray with 2 CPUs), records its RSS, resets the kernel's peak-RSS mark (/proc/self/clear_refs, so
Ray's own start-up peak is left out), runs the stage (8 partitions) and reads the driver's peak
RSS during the stage (VmHWM). Two paths, the same stage and corpus:
  - fuzzy, workers: trident.curate.dedup.fuzzy_distributed, what `executor: ray` runs (the driver gets counts);
  - fuzzy, driver union-find (baseline): the same Ray workers sign, bucket and verify, but the
    candidate pairs, Jaccard values and union-find are gathered on the driver (the local path);
  - exact, workers: ExactDedup as every executor runs it (drop keys go to their shard as files);
  - exact, driver gathers drop keys (baseline, the code before): the group tasks return their
    dropped keys to the driver, which splits them into per-shard row lists sent with the writes.
The parent checks that both paths keep the same documents. Rounds interleave scales and paths;
the figure per cell is the smallest peak over the rounds (best-of-N, so other jobs on the machine
inflate it least).

    python benchmarks/dedup_ray.py [--stage fuzzy|exact] [--docs N] [--scale 8] [--shards 8] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STAGES = {  # per stage: (the two paths, default docs at 1x, the counter that grows with the corpus)
    "fuzzy": (("workers", "driver union-find"), 3000, "verified_pairs"),
    "exact": (("workers", "driver gathers drop keys"), 50_000, "dropped:duplicate"),
}


def write_corpus(folder: Path, docs: int, shards: int, seed: int = 0) -> list[Path]:
    """`docs` documents (half in near-copy clusters) in `shards` shard files under `folder`."""
    from trident.curate.document import Document
    from trident.curate.read.shards import write_shard

    rng = random.Random(seed)
    words = lambda n: [f"w{rng.randrange(50_000)}" for _ in range(n)]
    out: list = []
    while len(out) < docs // 2:
        base = words(80)
        for _ in range(rng.randrange(2, 61)):
            text = list(base)
            for i in rng.sample(range(80), rng.randrange(0, 5)):
                text[i] = f"e{rng.randrange(10**7)}"
            out.append(" ".join(text))
    out += [" ".join(words(80)) for _ in range(docs - len(out))]
    rng.shuffle(out)
    paths = [folder / f"shard-{s:03d}.jsonl.zst" for s in range(shards)]
    for s, path in enumerate(paths):
        write_shard(path, (Document(f"d{i:08d}", out[i], {"dataset": "cc"}) for i in range(s, docs, shards)))
    return paths


def write_exact_corpus(folder: Path, docs: int, shards: int, seed: int = 0) -> list[Path]:
    """`docs` documents drawn from docs / 5 distinct texts, each copy re-cased and re-spaced."""
    from trident.curate.document import Document
    from trident.curate.read.shards import write_shard

    rng = random.Random(seed)
    texts = [[f"w{rng.randrange(50_000)}" for _ in range(12)] for _ in range(max(1, docs // 5))]

    def word(w: str) -> str:
        r = rng.random()
        return w.upper() + " " if r < 0.2 else w + rng.choice(["  ", "\n", "\t"]) if r < 0.4 else w + " "

    def copy(words: list[str]) -> str:
        return rng.choice(["", " "]) + "".join(map(word, words))

    paths = [folder / f"shard-{s:03d}.jsonl.zst" for s in range(shards)]
    for s, path in enumerate(paths):
        write_shard(path, (Document(f"d{i:08d}", copy(rng.choice(texts)), {"dataset": "cc"})
                           for i in range(s, docs, shards)))
    return paths


def _gathering_group_task(job: dict):
    """Baseline group step: the same choice as ExactDedup's, its dropped keys returned to the driver."""
    from trident.curate.dedup.exact import _exact_group_task

    _exact_group_task(job)
    files = sorted(Path(job["work"]).glob(f"drops/s*/p{job['part']:06d}.npy"))
    return np.concatenate([np.load(f, allow_pickle=False) for f in files] + [np.zeros(0, np.uint64)])


def _copy_task(job: tuple) -> dict:
    """Baseline write step: one shard copied without the rows the driver sent it."""
    from trident.curate.dedup.drop_rows import copy_without

    src, dst, rows, reason = job
    return copy_without(src, dst, set(rows), reason, "exact_dedup")


def run_exact_gathering(stage, inputs: list[Path], out: Path, executor) -> None:
    """ExactDedup.run as it was: every dropped key comes to the driver, row lists go out with the writes."""
    from trident.curate.dedup.drop_rows import drop_lists
    from trident.curate.dedup.exact import _exact_hash_task
    from trident.curate.stage import output_paths

    work = out / "_work_exact_dedup"
    executor.map(_exact_hash_task, [{"shard": i, "path": str(p), "work": str(work), "partitions": stage.partitions,
                                     "scope": stage.scope, "priority": stage.priority,
                                     "priority_field": stage.priority_field} for i, p in enumerate(inputs)])
    dropped = np.concatenate(executor.map(_gathering_group_task, [{"work": str(work), "part": p}
                                                                  for p in range(stage.partitions)]))
    rows = drop_lists(dropped, len(inputs))
    jobs = [(str(i), str(o), r, "duplicate") for i, o, r in zip(inputs, output_paths(inputs, out), rows)]
    for counters in executor.map(_copy_task, jobs):
        stage.counters.update(counters)
    shutil.rmtree(work, ignore_errors=True)


def status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS: now, VmHWM: peak since start or last reset), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"/proc/self/status has no {field} (this benchmark needs Linux)")


def reset_peak_rss() -> bool:
    """Restart VmHWM from the current RSS (Linux >= 4.0), so the peak excludes Ray's start-up."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def child(stage_name: str, corpus: Path, out: Path, path: str) -> dict:
    """One measured driver: Ray up, then the stage; prints its peaks and counters as one JSON line."""
    from trident.curate.dedup.exact import ExactDedup
    from trident.curate.dedup.fuzzy import FuzzyDedup
    from trident.curate.run.executors import RayExecutor

    executor = RayExecutor(workers=2, progress=False)
    executor.dedup_on_workers = path == "workers"
    inputs = sorted(corpus.glob("*.jsonl.zst"))
    try:
        ready, lifetime_before = status_mb("VmRSS"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        reset = reset_peak_rss()
        start = time.perf_counter()
        stage = FuzzyDedup(partitions=8) if stage_name == "fuzzy" else ExactDedup(partitions=8)
        if stage_name == "exact" and path != "workers":
            run_exact_gathering(stage, inputs, out, executor)
        else:
            stage.run(inputs, out, executor)
        seconds = time.perf_counter() - start
        peak = status_mb("VmHWM")
    finally:
        executor.close()
    keys = ("candidates", "verified_pairs", "components", "dropped:duplicate", "in")
    return {"ready_mb": ready, "peak_mb": peak, "peak_reset": reset, "lifetime_peak_before_mb": lifetime_before,
            "seconds": seconds,
            "counters": {k: stage.counters[k] for k in keys}}


def measure(stage: str, corpus: Path, out: Path, path: str) -> dict:
    cmd = [sys.executable, __file__, "--child", stage, str(corpus), str(out), path]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"child {path} on {corpus} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def kept(out: Path) -> list[str]:
    from trident.curate.read.shards import read_shard

    return sorted(doc.id for shard in sorted(out.glob("*.jsonl.zst")) for doc in read_shard(shard))


def run_rounds(args, root: Path) -> dict:
    """{(scale, path): the measurement with the lowest driver peak}, rounds interleaving both."""
    scales, results, paths = (1, args.scale), {}, STAGES[args.stage][0]
    for round_ in range(args.rounds):
        for scale in (scales if round_ % 2 == 0 else scales[::-1]):
            outs = {}
            for path in (paths if round_ % 2 == 0 else paths[::-1]):
                outs[path] = root / f"out{scale}-{round_}-{path.split()[0]}"
                got = measure(args.stage, root / f"corpus{scale}", outs[path], path)
                print(f"round {round_} scale {scale}x {path}: {got}", flush=True)
                if (scale, path) not in results or got["peak_mb"] < results[(scale, path)]["peak_mb"]:
                    results[(scale, path)] = got
            if kept(outs[paths[0]]) != kept(outs[paths[1]]):
                raise SystemExit(f"scale {scale}x: the two paths kept different documents")
    return results


def report(args, results: dict) -> None:
    """The table (peaks at 1x and at the largest scale, and their ratio) and the JSON line."""
    from common import emit_json, print_table

    rows, payload, big = [], {}, args.scale
    paths, _, grows = STAGES[args.stage]
    for path in paths:
        small, large = results[(1, path)], results[(big, path)]
        ratio = large["peak_mb"] / small["peak_mb"]
        growth = [r["peak_mb"] - r["ready_mb"] for r in (small, large)]
        rows.append([path, small["counters"]["in"], large["counters"]["in"], small["counters"][grows],
                     large["counters"][grows], round(small["peak_mb"], 1), round(large["peak_mb"], 1),
                     f"{ratio:.3f}", f"{growth[0]:.1f} / {growth[1]:.1f}",
                     f"{small['seconds']:.1f} / {large['seconds']:.1f}"])
        payload[path] = {"1x": small, f"{big}x": large, "peak_ratio": ratio}
    print_table(f"Driver peak RSS, {args.stage}_dedup on a 2-worker local Ray (best of {args.rounds})",
                ["path", "docs 1x", f"docs {big}x", f"{grows} 1x", f"{grows} {big}x", "peak MB 1x", f"peak MB {big}x",
                 "ratio", f"MB above Ray start 1x / {big}x", f"seconds 1x / {big}x"], rows)
    emit_json("dedup_ray" if args.stage == "fuzzy" else "dedup_exact_ray", {"args": vars(args), "paths": payload})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=tuple(STAGES), default="fuzzy")
    parser.add_argument("--docs", type=int, help="documents at scale 1x (default: 3,000 fuzzy, 50,000 exact)")
    parser.add_argument("--scale", type=int, default=8)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=4, metavar=("STAGE", "CORPUS", "OUT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        stage, corpus, out, path = args.child
        print("RESULT " + json.dumps(child(stage, Path(corpus), Path(out), path)), flush=True)
        return
    args.docs = args.docs or STAGES[args.stage][1]
    corpus_writer = write_corpus if args.stage == "fuzzy" else write_exact_corpus
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import load_average

    with tempfile.TemporaryDirectory(prefix="dedup_ray_") as tmp:
        for scale in (1, args.scale):
            corpus_writer(Path(tmp) / f"corpus{scale}", args.docs * scale, args.shards)
        print(f"load before: {load_average()}", flush=True)
        results = run_rounds(args, Path(tmp))
    report(args, results)

if __name__ == "__main__":
    main()
