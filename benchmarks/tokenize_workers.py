"""`trident tokenize` with 1 and 2 workers (and Megatron-LM's tools/preprocess_data.py when it is
installed): docs/s by wall clock, CPU seconds, and whether the .bin/.idx files are identical.

Corpus: `--docs` paragraph documents of 0.5-5 KB (benchmarks/dedup_mixes.py's generator, no
duplicates) in one JSONL file; a byte-level BPE tokenizer (`--vocab` tokens) trained on its first
2,000 documents. Each run is a fresh `python -m trident tokenize --workers W` process (start-up
included); CPU seconds are that process's and its children's (getrusage). Best of `--rounds`,
worker counts alternating. The 1 -> 2 ratio means something only when the cores are free: the
load average is printed beside it, and so is the ratio of CPU seconds (work per document).

Megatron: set MEGATRON_LM=/path/to/Megatron-LM (or have `megatron` importable from a checkout); the
benchmark then runs its tools/preprocess_data.py with the same tokenizer (HuggingFaceTokenizer,
--append-eod, --workers W) and compares the files byte for byte. Skipped, and said so, otherwise.

    python benchmarks/tokenize_workers.py [--docs N] [--vocab N] [--rounds N] [--quick]
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit_json, load_average, print_table
from dedup_mixes import paragraph_doc, vocabulary

ROOT = Path(__file__).resolve().parent.parent


def write_corpus(path: Path, docs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    vocab, cumulative = vocabulary(rng)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(docs):
            text = paragraph_doc(rng, vocab, cumulative, int(500 * 10 ** rng.random()))
            out.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child and its children)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - start, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def trident_command(corpus: Path, tokenizer: Path, prefix: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "trident", "tokenize", "--input", str(corpus), "--tokenizer", str(tokenizer),
            "--output-prefix", str(prefix), "--workers", str(workers), "--overwrite", "--json"]


def megatron_script() -> Path | None:
    """tools/preprocess_data.py of a Megatron-LM checkout (MEGATRON_LM, or beside an importable megatron)."""
    root = os.environ.get("MEGATRON_LM")
    if not root:
        try:
            import megatron
        except ImportError:
            return None
        root = str(Path(megatron.__file__).resolve().parent.parent)
    script = Path(root) / "tools" / "preprocess_data.py"
    return script if script.is_file() else None


def megatron_command(script: Path, corpus: Path, tokenizer: Path, prefix: Path, workers: int) -> list[str]:
    return [sys.executable, str(script), "--input", str(corpus), "--output-prefix", str(prefix),
            "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tokenizer.parent),
            "--append-eod", "--workers", str(workers), "--json-keys", "text"]


def identical(prefix_a: Path, prefix_b: Path) -> bool:
    return all(filecmp.cmp(f"{prefix_a}.{ext}", f"{prefix_b}.{ext}", shallow=False) for ext in ("bin", "idx"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--vocab", type=int, default=16_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="4,000 documents, 1 round")
    args = parser.parse_args()
    docs, rounds = (4000, 1) if args.quick else (args.docs, args.rounds)
    from trident.data.tokenizer import train_tokenizer

    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        write_corpus(corpus, docs)
        head = work / "head.jsonl"
        head.write_text("".join(corpus.read_text(encoding="utf-8").splitlines(keepends=True)[:2000]), encoding="utf-8")
        tokenizer = train_tokenizer([head], args.vocab, work / "tok").source
        tokenizer = Path(tokenizer)
        best: dict[str, tuple[float, float]] = {}
        main: dict[int, float] = {}  # the reading/writing process's CPU seconds (stats: main_process_cpu_s)
        for r in range(rounds):
            for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
                result = timed(trident_command(corpus, tokenizer, work / f"t{workers}", workers))
                main_cpu = json.loads((work / f"t{workers}.stats.json").read_text())["main_process_cpu_s"]
                if result < best.get(f"trident_{workers}", (float("inf"),)):
                    best[f"trident_{workers}"], main[workers] = result, main_cpu
        same_1_2 = identical(work / "t1", work / "t2")
        script = megatron_script()
        if script is not None:
            for workers in (1, 2):
                for _ in range(rounds):
                    result = timed(megatron_command(script, corpus, tokenizer, work / f"m{workers}", workers))
                    best[f"megatron_{workers}"] = min(best.get(f"megatron_{workers}", result), result)
        tokens = json.loads((work / "t1.stats.json").read_text())["tokens"]
        megatron_same = {w: identical(work / f"t{w}", work / f"m{w}_text_document") for w in (1, 2)} if script else None
    rows = [[name, round(docs / wall), round(wall, 2), round(cpu, 2), round(docs / cpu)]
            for name, (wall, cpu) in sorted(best.items())]
    print_table(f"tokenize {docs:,} documents ({tokens:,} tokens), fresh process each, best of {rounds}",
                ["run", "docs/s", "wall s", "CPU s", "docs per CPU s"], rows)
    payload = {"docs": docs, "tokens": tokens, "rounds": rounds,
               "runs": {k: {"wall_s": w, "cpu_s": c} for k, (w, c) in best.items()},
               "workers_1_to_2_wall": best["trident_1"][0] / best["trident_2"][0],
               "cpu_per_doc_2_over_1": best["trident_2"][1] / best["trident_1"][1],
               # on two free cores: all CPU of the 2-worker run spread over both, and never below the
               # main process's own share (which the workers do not take over)
               "cpu_bound_1_to_2": best["trident_1"][1] / max(best["trident_2"][1] / 2, main[2]),
               "main_cpu_share_2w": main[2] / best["trident_2"][1],
               "identical_1_2": same_1_2, "megatron": str(script) if script else "not installed (set MEGATRON_LM)",
               "identical_to_megatron": megatron_same,
               "load_before": load_before, "load_after": load_average()}
    for w in (1, 2):
        if f"megatron_{w}" in best:
            payload[f"vs_megatron_{w}w"] = best[f"megatron_{w}"][0] / best[f"trident_{w}"][0]
    print(f"1 -> 2 workers: {payload['workers_1_to_2_wall']:.2f}x docs/s (load {load_average()['load_1m']}); "
          f"CPU seconds 2w/1w {payload['cpu_per_doc_2_over_1']:.2f}, main process {payload['main_cpu_share_2w']:.0%} "
          f"of the 2-worker CPU: on two free cores at most {payload['cpu_bound_1_to_2']:.2f}x; "
          f"outputs identical: {same_1_2}; megatron: {payload['megatron']}")
    emit_json("tokenize_workers", payload)


if __name__ == "__main__":
    main()
