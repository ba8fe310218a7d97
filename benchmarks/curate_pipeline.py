"""trident's `curate-cc` pipeline against HuggingFace datatrove's equivalent, on one core, on the same
Common-Crawl-like WARC (benchmarks/curate_corpus.py: unique English articles, exact and near
duplicates, German and French pages, spam, tiny pages, 404s, PDFs; truth in each URL).

Pipelines (all with one worker, in this process; datatrove's extractor runs in its sandbox process,
whose CPU time is added to its extraction step):
  trident                   curate-cc as shipped (extract: resiliparse, langid: fastText lid.176)
  trident (old backends)    curate-cc with extract: trafilatura, langid: py3langid (the defaults before)
  datatrove                 benchmarks/curate_datatrove.py, MinHash with datatrove's default English
                            word tokenizer (spaCy)
  datatrove (str.split)     the same with a whitespace word tokenizer in MinHash
Times are CPU seconds (time.process_time, children included): per core, unaffected by other load;
per-stage seconds are each pipeline's own stage timers read with that CPU clock. Quality, from the
URLs kept: recall of the unique English articles, duplicate copies left, other pages kept.
Best of --rounds (interleaved).

    python benchmarks/curate_pipeline.py [--records 3000] [--rounds 1] [--out DIR] [--skip-datatrove]
"""
from __future__ import annotations

import argparse
import contextlib
import resource
import shutil
import tempfile
import time
import types
from pathlib import Path

from common import emit_json, load_average, print_table
from curate_corpus import score, write_corpus_warc
from trident.curate.read.record_log import RecordLog
from trident.curate.read.shards import read_documents
from trident.curate.run.pipeline import run_pipeline

OLD_BACKENDS = ["stages.extract.backend=trafilatura", "stages.langid.backend=py3langid"]


def cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def cpu_clock(module):
    """Within the block, `module`'s time.perf_counter is this process's CPU clock (stage timers)."""
    original = module.time
    module.time = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    module.time.perf_counter = time.process_time
    try:
        yield
    finally:
        module.time = original


def run_trident(warc: Path, out: Path, overrides: list[str]) -> tuple[list[str], dict[str, float], float]:
    """(URLs kept, {stage: CPU s}, total CPU s) of curate-cc on `warc`."""
    from trident.curate.read import read_task
    from trident.curate.run import phases as runner

    shutil.rmtree(out, ignore_errors=True)
    start = cpu_seconds()
    with cpu_clock(runner), cpu_clock(read_task):  # global stages' timers, streaming stages' timers
        stats = run_pipeline("curate-cc", [warc], out, workers=1, overrides=["progress=false", *overrides])
    total = cpu_seconds() - start
    urls = [d.meta["url"] for shard in stats["output"]["shards"] for d in read_documents(Path(shard), RecordLog())]
    return urls, {s["name"]: s["seconds"] for s in stats["stages"]}, total


def run_datatrove_cpu(warc: Path, work: Path, tokenizer: str | None) -> tuple[list[str], dict[str, float], float]:
    """(URLs kept, {step: CPU s}, total CPU s) of the datatrove pipeline."""
    from datatrove.utils import stats as datatrove_stats

    from curate_datatrove import run_datatrove

    shutil.rmtree(work, ignore_errors=True)
    start = cpu_seconds()
    with cpu_clock(datatrove_stats):
        urls, steps = run_datatrove(warc.parent, work, tokenizer)
    return urls, steps, cpu_seconds() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=3000, help="WARC response records")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the fastest of each is kept")
    parser.add_argument("--out", default=None)
    parser.add_argument("--skip-datatrove", action="store_true", help="trident only (datatrove not installed)")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="curate-bench-"))
    (root / "warc").mkdir(parents=True, exist_ok=True)
    warc = root / "warc" / "cc.warc.gz"
    kinds = write_corpus_warc(warc, args.records, args.seed)
    runs = {"trident": lambda: run_trident(warc, root / "trident", []),
            "trident (old backends)": lambda: run_trident(warc, root / "trident-old", OLD_BACKENDS)}
    if not args.skip_datatrove:
        import importlib.util
        import logging

        if importlib.util.find_spec("datatrove") is None or importlib.util.find_spec("spacy") is None:
            parser.error('datatrove and spacy are not installed: pip install -e ".[bench]", or --skip-datatrove')

        from loguru import logger

        logger.remove()  # datatrove's per-step log lines
        logging.getLogger("datatrove").setLevel(logging.ERROR)
        runs["datatrove"] = lambda: run_datatrove_cpu(warc, root / "datatrove", None)
        runs["datatrove (str.split)"] = lambda: run_datatrove_cpu(warc, root / "datatrove-split", "whitespace")
    best: dict[str, tuple] = {}
    load_before = load_average()
    for _ in range(args.rounds):
        for name, run in runs.items():
            result = run()
            if name not in best or result[2] < best[name][2]:
                best[name] = result
    print(f"{args.records} records ({dict(kinds)}), one core, CPU seconds, best of {args.rounds}; "
          f"load before {load_before}, after {load_average()}")
    summary = {}
    for name, (urls, stages, total) in best.items():
        stages = {**stages, "other (imports, shard files, executor, report)": total - sum(stages.values())}
        print_table(f"{name}: CPU seconds per stage", ["stage", "CPU s"], [[k, round(v, 2)] for k, v in stages.items()])
        summary[name] = {"cpu_s": round(total, 2), "records_per_s": round(args.records / total, 1), **score(urls, kinds),
                         "stages": {k: round(v, 3) for k, v in stages.items()}}
    baselines = [n for n in ("datatrove", "datatrove (str.split)") if n in summary]
    rows = [[name, s["cpu_s"], s["records_per_s"], *[round(s["records_per_s"] / summary[b]["records_per_s"], 2)
                                                     for b in baselines],
             s["english_recall"], s["duplicates_left"], s["other_kept"], s["documents"]] for name, s in summary.items()]
    print_table("whole pipeline", ["pipeline", "CPU s", "records/s", *[f"x {b}" for b in baselines],
                                   "English recall", "duplicates left", "other kept", "documents"], rows)
    emit_json("curate_pipeline", {"records": args.records, "kinds": dict(kinds), "pipelines": summary})


if __name__ == "__main__":
    main()
