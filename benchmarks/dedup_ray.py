"""Fuzzy dedup on a 2-worker local Ray cluster: the driver's peak memory as the corpus grows 1x -> 8x.

Corpus (written once per scale, before any measured process starts): `--shards` shards of synthetic
80-word documents, half unrelated and half in near-copy clusters of 2..60 members (each member
edits up to 4 words of its cluster's text), so candidate pairs and verified edges grow with the
corpus. Scale 8x has 8 times the documents of 1x in the same number of shards.

Each measurement is a fresh driver process (`--child`): it starts `RayExecutor(workers=2)` (a local
Ray with 2 CPUs), records its RSS, resets the kernel's peak-RSS mark (/proc/self/clear_refs, so
Ray's own start-up peak is left out), runs the fuzzy_dedup stage (8 partitions) and reads the
driver's peak RSS during the stage (VmHWM). Two paths, the same stage and corpus:
  - workers: trident.curate.dedup_distributed, what `executor: ray` runs (the driver gets counts);
  - driver union-find (baseline): the same Ray workers sign, bucket and verify, but the candidate
    pairs, Jaccard values and union-find are gathered on the driver (the local path).
The parent checks that both paths keep the same documents. Rounds interleave scales and paths;
the figure per cell is the smallest peak over the rounds (best-of-N, so other jobs on the machine
inflate it least).

    python benchmarks/dedup_ray.py [--docs 3000] [--scale 8] [--shards 8] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = ("workers", "driver union-find")


def write_corpus(folder: Path, docs: int, shards: int, seed: int = 0) -> list[Path]:
    """`docs` documents (half in near-copy clusters) in `shards` shard files under `folder`."""
    from trident.curate.document import Document
    from trident.curate.shards import write_shard

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


def child(corpus: Path, out: Path, path: str) -> dict:
    """One measured driver: Ray up, then the stage; prints its peaks and counters as one JSON line."""
    from trident.curate.executors import RayExecutor
    from trident.curate.fuzzy_dedup import FuzzyDedup

    executor = RayExecutor(workers=2, progress=False)
    executor.dedup_on_workers = path == "workers"
    try:
        ready, lifetime_before = status_mb("VmRSS"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        reset = reset_peak_rss()
        start = time.perf_counter()
        stage = FuzzyDedup(partitions=8)
        stage.run(sorted(corpus.glob("*.jsonl.zst")), out, executor)
        seconds = time.perf_counter() - start
        peak = status_mb("VmHWM")
    finally:
        executor.close()
    keys = ("candidates", "verified_pairs", "components", "dropped:duplicate", "in")
    return {"ready_mb": ready, "peak_mb": peak, "peak_reset": reset, "lifetime_peak_before_mb": lifetime_before,
            "seconds": seconds,
            "counters": {k: stage.counters[k] for k in keys}}


def measure(corpus: Path, out: Path, path: str) -> dict:
    cmd = [sys.executable, __file__, "--child", str(corpus), str(out), path]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"child {path} on {corpus} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def kept(out: Path) -> list[str]:
    from trident.curate.shards import read_shard

    return sorted(doc.id for shard in sorted(out.glob("*.jsonl.zst")) for doc in read_shard(shard))


def run_rounds(args, root: Path) -> dict:
    """{(scale, path): the measurement with the lowest driver peak}, rounds interleaving both."""
    scales, results = (1, args.scale), {}
    for round_ in range(args.rounds):
        for scale in (scales if round_ % 2 == 0 else scales[::-1]):
            outs = {}
            for path in (PATHS if round_ % 2 == 0 else PATHS[::-1]):
                outs[path] = root / f"out{scale}-{round_}-{path.split()[0]}"
                got = measure(root / f"corpus{scale}", outs[path], path)
                print(f"round {round_} scale {scale}x {path}: {got}", flush=True)
                if (scale, path) not in results or got["peak_mb"] < results[(scale, path)]["peak_mb"]:
                    results[(scale, path)] = got
            if kept(outs[PATHS[0]]) != kept(outs[PATHS[1]]):
                raise SystemExit(f"scale {scale}x: the two paths kept different documents")
    return results


def report(args, results: dict) -> None:
    """The table (peaks at 1x and at the largest scale, and their ratio) and the JSON line."""
    from common import emit_json, print_table

    rows, payload, big = [], {}, args.scale
    for path in PATHS:
        small, large = results[(1, path)], results[(big, path)]
        ratio = large["peak_mb"] / small["peak_mb"]
        growth = [r["peak_mb"] - r["ready_mb"] for r in (small, large)]
        rows.append([path, small["counters"]["in"], large["counters"]["in"], small["counters"]["verified_pairs"],
                     large["counters"]["verified_pairs"], round(small["peak_mb"], 1), round(large["peak_mb"], 1),
                     f"{ratio:.3f}", f"{growth[0]:.1f} / {growth[1]:.1f}",
                     f"{small['seconds']:.1f} / {large['seconds']:.1f}"])
        payload[path] = {"1x": small, f"{big}x": large, "peak_ratio": ratio}
    print_table(f"Driver peak RSS, fuzzy_dedup on a 2-worker local Ray (best of {args.rounds})",
                ["path", "docs 1x", f"docs {big}x", "edges 1x", f"edges {big}x", "peak MB 1x", f"peak MB {big}x",
                 "ratio", f"MB above Ray start 1x / {big}x", f"seconds 1x / {big}x"], rows)
    emit_json("dedup_ray", {"args": vars(args), "paths": payload})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=3000, help="documents at scale 1x")
    parser.add_argument("--scale", type=int, default=8)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, metavar=("CORPUS", "OUT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        corpus, out, path = args.child
        print("RESULT " + json.dumps(child(Path(corpus), Path(out), path)), flush=True)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import load_average

    with tempfile.TemporaryDirectory(prefix="dedup_ray_") as tmp:
        for scale in (1, args.scale):
            write_corpus(Path(tmp) / f"corpus{scale}", args.docs * scale, args.shards)
        print(f"load before: {load_average()}", flush=True)
        results = run_rounds(args, Path(tmp))
    report(args, results)

if __name__ == "__main__":
    main()
