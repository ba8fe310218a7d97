"""Curation throughput on one core: documents/s and MB/s per streaming stage and for the whole
`curate-cc` pipeline, on generated sample WARCs (trident.curate.samples).

Times are CPU seconds of this process (time.process_time), i.e. per core, unaffected by other
load on the machine. Baseline measured in the same run: reading the WARC records alone (warcio + decoding); every
other number is also printed as a ratio to it.

    python benchmarks/curate_pipeline.py [--warcs 4] [--docs 120] [--out /tmp/curate-bench]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from trident.curate.pipeline import run_pipeline
from trident.curate.samples import write_sample_warc
from trident.curate.shards import RecordLog, read_documents
from trident.curate.stage import build_stage

STAGES = [("extract", {}), ("langid", {"languages": ["en"]}), ("clean", {}), ("min_length", {"min_tokens": 128}),
          ("gopher_quality", {}), ("gopher_repetition", {}), ("c4_lines", {})]


def timed(fn):
    """(result, CPU seconds of this process): CPU time, so other load on the machine does not count."""
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warcs", type=int, default=4, help="sample WARC files (different seeds)")
    parser.add_argument("--docs", type=int, default=120, help="distinct articles per WARC (<= 143)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="curate-bench-"))
    warcs = [root / f"sample-{i}.warc.gz" for i in range(args.warcs)]
    for i, path in enumerate(warcs):
        write_sample_warc(path, n_docs=args.docs, seed=i)
    megabytes = sum(p.stat().st_size for p in warcs) / 1e6

    def read_all():
        return [d for p in warcs for d in read_documents(p, RecordLog())]

    docs, base_s = timed(read_all)
    base_rate = len(docs) / base_s
    rows = [("read (baseline)", len(docs), base_s)]
    current = docs
    for name, params in STAGES:
        stage = build_stage(name, params)
        stage.setup()  # model loading is start-up cost, not throughput
        current, seconds = timed(lambda: list(stage.process(current)))
        rows.append((name, stage.counters["in"], seconds))
    stats, pipeline_s = timed(lambda: run_pipeline("curate-cc", warcs, root / "out", workers=1,
                                                   overrides=["progress=false"]))
    records = stats["stages"][0]["counters"]["in"]
    html_mb = stats["stages"][1]["counters"]["bytes_in"] / 1e6  # decoded HTML entering extract
    rows.append(("curate-cc pipeline", records, pipeline_s))
    print(f"{len(warcs)} WARC files, {megabytes:.2f} MB compressed, {len(docs)} response records; one core")
    print(f"{'stage':<22}{'docs':>7}{'cpu s':>9}{'docs/s':>10}{'x baseline':>12}")
    for name, n, seconds in rows:
        rate = n / seconds if seconds else float("inf")
        print(f"{name:<22}{n:>7}{seconds:>9.2f}{rate:>10.1f}{rate / base_rate:>12.3f}")
    print(f"whole pipeline: {records / pipeline_s:.1f} records/s, {html_mb / pipeline_s:.3f} MB/s of HTML "
          f"of CPU; {stats['output']['documents']} documents out")
    print(json.dumps({"records_per_s": records / pipeline_s, "html_mb_per_s": html_mb / pipeline_s,
                      "docs_out": stats["output"]["documents"]}))


if __name__ == "__main__":
    main()
