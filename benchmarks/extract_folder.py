"""A documentation folder as a user brings it (issue 60 item 3): pages per CPU second of trident's
`extract` stage (resiliparse + section unmasking + the list post-pass) against resiliparse alone and
trafilatura on the same pages, the slowest page of each, and `trident curate` of the folder with
one and two workers (wall seconds; the folder is read as several groups so both workers have work).

Real pages: Debian's documentation packages (`apt-get install sqlite3-doc python3-doc git-doc`);
the default folder is sqlite's 766 pages (27 MB, capi3ref.html 627 KB). Never used by tests.

    python benchmarks/extract_folder.py [--folder /usr/share/doc/sqlite3] [--pages 0] [--trafilatura-pages 200]
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Timer, emit_json, print_table, two_process_ceiling


def _pages(folder: Path, limit: int) -> list[tuple[str, str]]:
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".html", ".htm") and p.is_file())
    files = files[:limit] if limit else files
    return [(p.relative_to(folder).as_posix(), p.read_text(encoding="utf-8", errors="replace")) for p in files]


def _extractors() -> dict:
    import trafilatura
    from resiliparse.extract.html2text import extract_plain_text

    from trident.curate.document import Document
    from trident.curate.extract.html import Extract

    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    stage = Extract()
    stage.setup()

    def trident_extract(html: str) -> str:
        doc = stage.apply(Document("p", html, {"content_type": "text/html"}))
        return doc.text if isinstance(doc, Document) else ""

    return {"trident extract": trident_extract,
            "resiliparse alone": lambda html: extract_plain_text(html, main_content=True),
            "trafilatura": lambda html: trafilatura.extract(html, deduplicate=False) or ""}


def measure(pages: list[tuple[str, str]], extract) -> dict:
    """CPU seconds over the pages, pages per CPU second, characters out, and the slowest page."""
    slowest, chars = ("", 0.0), 0
    with Timer() as total:
        for name, html in pages:
            start = time.process_time()
            chars += len(extract(html))
            spent = time.process_time() - start
            slowest = max(slowest, (name, spent), key=lambda pair: pair[1])
    return {"pages": len(pages), "cpu_s": round(total.cpu, 3), "pages_per_cpu_s": round(len(pages) / total.cpu, 1),
            "chars": chars, "slowest_page": slowest[0], "slowest_s": round(slowest[1], 3)}


def curate_wall(folder: Path, workers: int) -> float:
    """Wall seconds of `trident curate` with the extract stage alone over the folder, in a fresh
    process as users run it (in this process, after the extractors above, the pool's helpers were
    started by spawn and two workers measured slower than one)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "extract.yaml"
        config.write_text("progress: false\nstages:\n  - stage: extract\n")
        command = [sys.executable, "-m", "trident", "curate", str(config), "--input", str(folder),
                   "--out", str(Path(tmp) / "out"), f"workers={workers}"]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default="/usr/share/doc/sqlite3")
    parser.add_argument("--pages", type=int, default=0, help="at most this many pages (0: all)")
    parser.add_argument("--trafilatura-pages", type=int, default=200, help="trafilatura is slow: its page sample")
    parser.add_argument("--rounds", type=int, default=3, help="1- and 2-worker runs, alternating; best of each")
    args = parser.parse_args()
    folder = Path(args.folder)
    pages = _pages(folder, args.pages)
    rows, results = [], {}
    for label, extract in _extractors().items():
        sample = pages[:args.trafilatura_pages] if label == "trafilatura" and args.trafilatura_pages else pages
        results[label] = measure(sample, extract)
        r = results[label]
        rows.append([label, r["pages"], r["cpu_s"], r["pages_per_cpu_s"], r["chars"], r["slowest_page"], r["slowest_s"]])
    print_table(f"extraction of {folder} ({len(pages)} pages), CPU seconds",
                ["extractor", "pages", "CPU s", "pages / CPU s", "chars out", "slowest page", "its CPU s"], rows)
    walls = {1: float("inf"), 2: float("inf")}
    for round_ in range(args.rounds):  # alternating, best of each: both see the same machine
        for workers in ((1, 2) if round_ % 2 == 0 else (2, 1)):
            walls[workers] = min(walls[workers], curate_wall(folder, workers))
    ceiling = two_process_ceiling()
    speedup = walls[1] / walls[2]
    print_table("trident curate (extract stage) over the folder, wall seconds",
                ["workers", "wall s", "speed-up", "machine's own 2-process ceiling"],
                [[1, round(walls[1], 2), 1.0, ""], [2, round(walls[2], 2), round(speedup, 2), ceiling["throughput"]]])
    emit_json("extract_folder", {"folder": str(folder), "extractors": results,
                                 "curate_wall_s": {str(k): round(v, 3) for k, v in walls.items()},
                                 "speedup_2_workers": round(speedup, 3), "two_process_ceiling": ceiling})


if __name__ == "__main__":
    main()
