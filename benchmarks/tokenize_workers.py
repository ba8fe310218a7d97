"""`trident tokenize` with 1 and 2 workers (and Megatron-LM's tools/preprocess_data.py when it is
installed): docs/s by wall clock, CPU seconds, and whether the .bin/.idx files are identical.

Corpus: `--docs` paragraph documents of 0.5-5 KB (benchmarks/dedup_mixes.py's generator, no
duplicates) in one JSONL file; a byte-level BPE tokenizer (`--vocab` tokens) trained on its first
2,000 documents. Each run is a fresh `python -m trident tokenize --workers W` process (start-up
included); CPU seconds are that process's and its children's (getrusage). Best of `--rounds`,
worker counts alternating. The 1 -> 2 ratio means something only when the cores are free: the
load average is printed beside it, and so is the ratio of CPU seconds (work per document).

The machine's own ceiling is printed beside the 1 -> 2 ratio, measured in the same run: two
pure-Python loops in two processes against one (benchmarks/common.py two_process_ceiling), and this
very workload split by hand: two independent 1-worker `trident tokenize` processes, each on half of
the corpus, at once; their wall and summed CPU against one process on the whole corpus. What the
2-worker run costs beyond that pair is trident's own overhead (worker start-up, chunks and token
arrays crossing the pipes); what the pair costs beyond one process is the machine's.

Megatron: `--megatron PATH` (a Megatron-LM checkout), else MEGATRON_LM=PATH, else an importable
`megatron` from a checkout; the benchmark then runs its tools/preprocess_data.py with the same
tokenizer (HuggingFaceTokenizer, --append-eod, --workers W), checks that the .bin/.idx files are
byte-identical to trident's and prints the docs/s ratio. Without one it says so and skips it.

    python benchmarks/tokenize_workers.py [--docs N] [--vocab N] [--rounds N] [--quick] [--megatron PATH]
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import random
import sys
import tempfile
from pathlib import Path

from common import emit_json, load_average, print_table, timed_processes, two_process_ceiling
from dedup_mixes import paragraph_doc, vocabulary



def write_corpus(path: Path, docs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    vocab, cumulative = vocabulary(rng)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(docs):
            text = paragraph_doc(rng, vocab, cumulative, int(500 * 10 ** rng.random()))
            out.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")


def trident_command(corpus: Path, tokenizer: Path, prefix: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "trident", "tokenize", "--input", str(corpus), "--tokenizer", str(tokenizer),
            "--output-prefix", str(prefix), "--workers", str(workers), "--overwrite", "--json"]


def megatron_script(given: str | None = None) -> Path | None:
    """tools/preprocess_data.py of a Megatron-LM checkout (--megatron, MEGATRON_LM, or beside an
    importable megatron); None where there is none."""
    root = given or os.environ.get("MEGATRON_LM")
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


def halves_at_once(corpus: Path, tokenizer: Path, work: Path) -> tuple[float, float]:
    """(wall, CPU) of two independent 1-worker trident processes, each on half of the corpus, run
    at once: what this machine gives two copies of this workload that share nothing."""
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    halves = [work / "half0.jsonl", work / "half1.jsonl"]
    halves[0].write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    halves[1].write_text("".join(lines[len(lines) // 2 :]), encoding="utf-8")
    return timed_processes(*(trident_command(h, tokenizer, work / f"h{k}", 1) for k, h in enumerate(halves)))


def identical(prefix_a: Path, prefix_b: Path) -> bool:
    return all(filecmp.cmp(f"{prefix_a}.{ext}", f"{prefix_b}.{ext}", shallow=False) for ext in ("bin", "idx"))


def measure(corpus: Path, tokenizer: Path, work: Path, rounds: int, script: Path | None) -> tuple[dict, dict]:
    """Best (wall, CPU) per run kind, and the main process's CPU of the best 1- and 2-worker runs.
    Each round runs 1 and 2 workers (order alternating) and the two half-corpus runs at once."""
    best: dict[str, tuple[float, float]] = {}
    main: dict[int, float] = {}  # the reading/writing process's CPU seconds (stats: main_process_cpu_s)
    for r in range(rounds):
        for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
            result = timed_processes(trident_command(corpus, tokenizer, work / f"t{workers}", workers))
            main_cpu = json.loads((work / f"t{workers}.stats.json").read_text())["main_process_cpu_s"]
            if result < best.get(f"trident_{workers}", (float("inf"),)):
                best[f"trident_{workers}"], main[workers] = result, main_cpu
        best["halves_at_once"] = min(best.get("halves_at_once", (float("inf"), 0.0)),
                                     halves_at_once(corpus, tokenizer, work))
    for workers in (1, 2) if script is not None else ():
        for _ in range(rounds):
            result = timed_processes(megatron_command(script, corpus, tokenizer, work / f"m{workers}", workers))
            best[f"megatron_{workers}"] = min(best.get(f"megatron_{workers}", result), result)
    return best, main


def report(best: dict, main: dict, same_1_2: bool, script: Path | None, megatron_same: dict | None,
           ceiling: list, load_before: dict) -> dict:
    """The figures (JSON payload) and the lines printed beside the table."""
    payload = {"runs": {k: {"wall_s": w, "cpu_s": c} for k, (w, c) in best.items()},
               "workers_1_to_2_wall": best["trident_1"][0] / best["trident_2"][0],
               "cpu_per_doc_2_over_1": best["trident_2"][1] / best["trident_1"][1],
               # on two free cores: all CPU of the 2-worker run spread over both, and never below the
               # main process's own share (which the workers do not take over)
               "cpu_bound_1_to_2": best["trident_1"][1] / max(best["trident_2"][1] / 2, main[2]),
               "main_cpu_share_2w": main[2] / best["trident_2"][1], "identical_1_2": same_1_2,
               "megatron": str(script) if script else "not found (--megatron PATH or MEGATRON_LM=PATH)",
               "identical_to_megatron": megatron_same,
               # the machine's own ceiling: two share-nothing copies (pure-Python loops; this very
               # workload on two halves) against one
               "ceiling_loops": ceiling,
               "halves_1_to_2_wall": best["trident_1"][0] / best["halves_at_once"][0],
               "halves_cpu_over_1": best["halves_at_once"][1] / best["trident_1"][1],
               "trident_cpu_2w_over_halves": best["trident_2"][1] / best["halves_at_once"][1],
               "load_before": load_before, "load_after": load_average()}
    loops = " / ".join(f"{c['throughput']}x" for c in ceiling)
    print(f"1 -> 2 workers: {payload['workers_1_to_2_wall']:.2f}x docs/s, CPU 2w/1w {payload['cpu_per_doc_2_over_1']:.2f} "
          f"(main process {payload['main_cpu_share_2w']:.0%} of it); this machine's ceiling now: two pure-Python loops "
          f"{loops} one (before / after), two independent half-corpus 1-worker runs at once "
          f"{payload['halves_1_to_2_wall']:.2f}x with CPU {payload['halves_cpu_over_1']:.2f}x one run's; the 2-worker run's "
          f"CPU over that pair's (trident's own overhead): {payload['trident_cpu_2w_over_halves']:.2f}; "
          f"outputs identical 1 vs 2 workers: {same_1_2}; load {load_before['load_1m']} -> {load_average()['load_1m']}")
    if script is None:
        print("Megatron-LM: not found (give --megatron PATH to a checkout, or MEGATRON_LM=PATH): no comparison made")
    for w in (1, 2) if script is not None else ():
        payload[f"vs_megatron_{w}w"] = best[f"megatron_{w}"][0] / best[f"trident_{w}"][0]
        print(f"Megatron-LM preprocess_data.py ({script}), {w} worker(s): trident {payload[f'vs_megatron_{w}w']:.2f}x "
              f"its docs/s; .bin/.idx identical: {megatron_same[w]}")
    return payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--vocab", type=int, default=16_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="4,000 documents, 1 round")
    parser.add_argument("--megatron", metavar="PATH", help="a Megatron-LM checkout to compare against")
    args = parser.parse_args()
    docs, rounds = (4000, 1) if args.quick else (args.docs, args.rounds)
    from trident.data.tokenizer import train_tokenizer

    load_before, ceiling = load_average(), [two_process_ceiling()]
    script = megatron_script(args.megatron)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        write_corpus(corpus, docs)
        head = work / "head.jsonl"
        head.write_text("".join(corpus.read_text(encoding="utf-8").splitlines(keepends=True)[:2000]), encoding="utf-8")
        tokenizer = Path(train_tokenizer([head], args.vocab, work / "tok").source)
        # Megatron's HuggingFaceTokenizer takes EOD from the folder's config (trident: from tokenizer.json)
        (tokenizer.parent / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
        best, main = measure(corpus, tokenizer, work, rounds, script)
        same_1_2 = identical(work / "t1", work / "t2")
        tokens = json.loads((work / "t1.stats.json").read_text())["tokens"]
        megatron_same = {w: identical(work / f"t{w}", work / f"m{w}_text_document") for w in (1, 2)} if script else None
    ceiling.append(two_process_ceiling())
    rows = [[name, round(docs / wall), round(wall, 2), round(cpu, 2), round(docs / cpu)]
            for name, (wall, cpu) in sorted(best.items())]
    print_table(f"tokenize {docs:,} documents ({tokens:,} tokens), fresh process each, best of {rounds}",
                ["run", "docs/s", "wall s", "CPU s", "docs per CPU s"], rows)
    payload = report(best, main, same_1_2, script, megatron_same, ceiling, load_before)
    emit_json("tokenize_workers", {"docs": docs, "tokens": tokens, "rounds": rounds, **payload})


if __name__ == "__main__":
    main()
