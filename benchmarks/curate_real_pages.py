"""trident's `curate-cc` against datatrove's equivalent on real pages (issue 60 item 7): a WARC of
~766 documentation pages of Debian's python3-doc, postgresql-doc and git-doc HTML (every k-th page
of the 1,941 installed, in path order; `apt-get install python3-doc postgresql-doc git-doc`),
written with warcio as response records (http://docs.example/<package>/<path>).

Pipelines and timing as benchmarks/curate_pipeline.py (one core each, in this process, CPU seconds
with children; datatrove with spaCy and with `str.split` words). Quality, since real pages carry no
planted truth: documents kept, their share of the pages, and the main-text characters kept.

    python benchmarks/curate_real_pages.py [--pages 766] [--rounds 1] [--skip-datatrove] [--out DIR]
"""
from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path

from common import emit_json, load_average, print_table
from curate_pipeline import run_datatrove_cpu, run_trident

FOLDERS = {"python3-doc": "/usr/share/doc/python3-doc/html", "postgresql-doc": "/usr/share/doc/postgresql-doc-15/html",
           "git-doc": "/usr/share/doc/git-doc"}


def doc_pages(count: int) -> list[tuple[str, Path]]:
    """(URL, file) of ``count`` pages spread evenly over the installed documentation, in path order."""
    pages = [(f"http://docs.example/{name}/{path.relative_to(root)}", path)
             for name, root in FOLDERS.items() for path in sorted(Path(root).rglob("*.html")) if path.is_file()]
    if not pages:
        raise SystemExit("no documentation pages: apt-get install python3-doc postgresql-doc git-doc")
    step = len(pages) / min(count, len(pages))
    return [pages[int(k * step)] for k in range(min(count, len(pages)))]


def write_pages_warc(path: Path, pages: list[tuple[str, Path]]) -> int:
    """The pages as gzipped WARC response records; returns the bytes of HTML written."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    total = 0
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for number, (url, file) in enumerate(pages):
            body = file.read_bytes()
            total += len(body)
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            # the payload type as Common Crawl writes it: without it datatrove's reader guesses each page's
            # type with libmagic and skipped 557 of these 766 pages as not HTML
            headers = {"WARC-Record-ID": f"<urn:uuid:{number:032x}>", "WARC-Date": "2026-12-06T12:00:00Z",
                       "WARC-Identified-Payload-Type": "text/html"}
            writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body),
                                                          warc_headers_dict=headers, http_headers=http))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=766)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--skip-datatrove", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="curate-real-"))
    (root / "warc").mkdir(parents=True, exist_ok=True)
    warc = root / "warc" / "docs.warc.gz"
    pages = doc_pages(args.pages)
    html_bytes = write_pages_warc(warc, pages)
    runs = {"trident": lambda: run_trident(warc, root / "trident", [])}
    if not args.skip_datatrove:
        import logging

        from loguru import logger

        logger.remove()
        logging.getLogger("datatrove").setLevel(logging.ERROR)
        runs["datatrove"] = lambda: run_datatrove_cpu(warc, root / "datatrove", None)
        runs["datatrove (str.split)"] = lambda: run_datatrove_cpu(warc, root / "datatrove-split", "whitespace")
    load_before, best = load_average(), {}
    for _ in range(args.rounds):
        for name, run in runs.items():
            result = run()
            if name not in best or result[2] < best[name][2]:
                best[name] = result
    summary = {}
    for name, (urls, stages, total) in best.items():
        stages = {**stages, "other (imports, shard files, executor, report)": total - sum(stages.values())}
        print_table(f"{name}: CPU seconds per stage", ["stage", "CPU s"], [[k, round(v, 2)] for k, v in stages.items()])
        summary[name] = {"cpu_s": round(total, 2), "pages_per_s": round(len(pages) / total, 1), "kept": len(set(urls)),
                         "stages": {k: round(v, 3) for k, v in stages.items()}}
    baselines = [n for n in ("datatrove", "datatrove (str.split)") if n in summary]
    print(f"{len(pages)} pages ({html_bytes / 1e6:.1f} MB of HTML), one core, CPU seconds, best of {args.rounds}; "
          f"load before {load_before}, after {load_average()}")
    print_table("real documentation pages", ["pipeline", "CPU s", "pages/s", *[f"x {b}" for b in baselines],
                                             "documents kept", "share kept"],
                [[name, s["cpu_s"], s["pages_per_s"], *[round(s["pages_per_s"] / summary[b]["pages_per_s"], 2)
                                                         for b in baselines], s["kept"], round(s["kept"] / len(pages), 3)]
                 for name, s in summary.items()])
    emit_json("curate_real_pages", {"pages": len(pages), "html_mb": round(html_bytes / 1e6, 1), "pipelines": summary})


if __name__ == "__main__":
    main()
