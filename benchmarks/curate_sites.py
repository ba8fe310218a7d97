"""`trident curate curate-cc` on multi-site HTML with damaged records (benchmarks/curate_sites_corpus.py),
against HuggingFace datatrove's equivalent (benchmarks/curate_datatrove.py), one core each.

The corpus: .warc.gz files of pages from hosts with their own templates (menus, breadcrumbs,
sidebars, footers, cookie banners, DocBook "Prev Up Chapter N. Title Home Next" lines) around
articles with link lists, definition lists and parameter tables; exact and near duplicates, German
and French pages, 404s; and planted damaged records (a bad HTTP status line, a flipped byte in a
gzip member, a bad WARC header, a truncated tail), one of each in each of two files.

What is measured (trident: curate-cc as shipped, with keep_work so that the text before site_lines
can be read back):
  per-stage CPU seconds   each pipeline's own stage timers read with the CPU clock
                          (benchmarks/curate_pipeline.py), the rest of its CPU time as "other"
  damage                  records lost per file and reason == the planted ones, exactly
  accounting, drop logs   stats.json's accounting check; drop-log records == dropped counters; every
                          URL of the corpus is either in the output or in a drop log
  template lines left     lines of kept documents equal to a template line of their page, before
                          site_lines (after extraction) and in the output; recall of site_lines
  article text kept       share of the planted titles, headings, paragraphs, list items, definitions
                          and table cells (prose cells) of the unique articles found in the output
  records/s per core      response records read / CPU seconds, and the ratio trident/datatrove
datatrove stops at the first damaged gzip member (the task fails), so it runs on the same files
without the damaged records; its reader is also run alone over the damaged files, to show what
it reads there.

    python benchmarks/curate_sites.py [--records 2000] [--out DIR] [--skip-datatrove]
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from common import emit_json, load_average, print_table
from curate_pipeline import cpu_clock, cpu_seconds
from curate_sites_corpus import CATEGORIES, write_sites_corpus
from trident.curate.droplog import read_log
from trident.curate.read.shards import read_shard
from trident.curate.run.pipeline import run_pipeline
from trident.text.damage import lost_by_file

TRIDENT_ROWS = {"read": "read WARC", "extract": "extract", "langid": "language id", "site_lines": "site_lines",
                "clean": "clean (ftfy)", "min_length": "min length", "fuzzy_dedup": "fuzzy dedup",
                "exact_dedup": "exact dedup"}
# datatrove's steps by what they do (the first match names the row)
DATATROVE_ROWS = (("Jsonl", "intermediate files between phases"), ("READER: 🕷 Warc", "read WARC"),
                  ("Trafilatura", "extract"), ("extractor sandbox", "extract"), ("Language", "language id"),
                  ("FTFY", "clean (ftfy)"), ("Lambda", "min length"), ("MinHash", "fuzzy dedup"),
                  ("exact-dedup", "exact dedup"))
ROWS = ("read WARC", "extract", "language id", "site_lines", "clean (ftfy)", "min length", "fuzzy dedup",
        "exact dedup", "intermediate files between phases", "other (imports, executor, report)")
MIN_HOST_DOCS = 10  # curate-cc's site_lines.min_host_docs: smaller hosts are left alone
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'"})


def key(text: str) -> str:
    """Comparison key: case-folded, quotes straightened (ftfy does), white space removed."""
    return "".join(text.translate(_QUOTES).casefold().split())


def line_keys(text: str) -> list[str]:
    """Keys of the non-blank lines, list bullets removed."""
    return [key(line.strip().lstrip("•-*· ")) for line in text.split("\n") if line.strip()]


def template_lines(truth: dict, texts: dict[str, str]) -> int:
    """Lines of `texts` equal to a template line of their page."""
    found = 0
    for url, text in texts.items():
        template = {key(line) for line in truth[url].template}
        found += sum(1 for line in line_keys(text) if line in template)
    return found


def content_kept(truth: dict, texts: dict[str, str]) -> dict:
    """Per category, the share of the unique articles' planted pieces found in the output (in the
    best-kept copy of each article, against that copy's own pieces: a near copy has other words);
    articles kept; duplicate copies left; other pages kept."""
    copies: dict[int, list[str]] = {}
    keys = {url: key(text) for url, text in texts.items() if truth[url].group >= 0}
    for url in keys:
        copies.setdefault(truth[url].group, []).append(url)
    found, total = Counter(), Counter()
    originals = [p for p in truth.values() if p.kind == "english"]
    for page in originals:
        for category in CATEGORIES:
            # (found, planted) in the best copy; near_copy may merge two paragraphs, so a copy's own count
            scores = [(sum(key(piece) in keys[url] for piece in truth[url].content[category]),
                       len(truth[url].content[category])) for url in copies.get(page.group, [])]
            best = max(scores, default=(0, len(page.content[category])))
            found[category], total[category] = found[category] + best[0], total[category] + best[1]
    result = {"articles": round(len(copies) / len(originals), 4)}
    result.update({c: round(found[c] / max(total[c], 1), 4) for c in CATEGORIES})
    result["duplicate copies left"] = sum(len(v) - 1 for v in copies.values())
    result["other pages kept"] = sum(1 for url in texts if truth[url].group < 0)
    return result


def run_trident(warc_dir: Path, out: Path) -> tuple[dict, float]:
    """(stats.json, CPU seconds) of curate-cc on `warc_dir`, work/ kept; a failed accounting
    check is reported, not raised."""
    from trident.curate.run import phases as runner
    from trident.curate.document import CurateError

    shutil.rmtree(out, ignore_errors=True)
    start = cpu_seconds()
    with cpu_clock(runner):
        try:
            run_pipeline("curate-cc", [warc_dir], out, workers=1, overrides=["progress=false", "keep_work=true"])
        except CurateError as err:  # stats.json is written before the accounting check raises
            print(f"trident: {err}")
    return json.loads((out / "stats.json").read_text()), cpu_seconds() - start


def shard_texts(paths) -> dict[str, str]:
    return {doc.meta["url"]: doc.text for path in paths for doc in read_shard(path)}


def trident_figures(truth: dict, out: Path, stats: dict) -> dict:
    """Damage, accounting, drop logs and template lines of a curate-cc run in `out`."""
    final = shard_texts(sorted(out.glob("shard-?????.jsonl.zst")))
    before = shard_texts(sorted((out / "work" / "phase-00").glob("shard-?????.jsonl.zst")))  # extract + langid
    read = stats["stages"][0]["counters"]
    lost = {Path(file).name: reasons for file, reasons in lost_by_file(read).items()}
    planted: dict[str, Counter] = {}
    for page in truth.values():
        if page.kind.startswith("damaged:"):
            planted.setdefault(page.file, Counter())[page.kind.split(":", 1)[1]] += 1
    logged = {record["url"] for log in (out / "drops").rglob("*.drops.jsonl.zst") for record in read_log(log)}
    dropped = sum(v for s in stats["stages"] for k, v in s["counters"].items() if k.startswith("dropped:"))
    unaccounted = [url for url, page in truth.items()
                   if not page.kind.startswith("damaged:") and url not in final and url not in logged]
    hosts = Counter(truth[url].host for url in before)
    large = {url: before[url] for url in final if hosts[truth[url].host] >= MIN_HOST_DOCS}
    left = {"before": template_lines(truth, {url: before[url] for url in final}),
            "after": template_lines(truth, final),
            "large hosts before": template_lines(truth, large),
            "large hosts after": template_lines(truth, {url: final[url] for url in large})}
    return {"records read": read.get("in", 0), "lost": lost, "planted": {f: dict(c) for f, c in planted.items()},
            "damage exact": lost == {f: dict(c) for f, c in planted.items()},
            "accounting ok": stats["accounting"]["ok"], "drop-log records": stats["drops"]["records"],
            "dropped": dropped, "unaccounted urls": len(unaccounted), "template lines": left,
            "documents": len(final), "content": content_kept(truth, final),
            "content before site_lines": content_kept(truth, {url: before[url] for url in final})}


def run_datatrove_texts(warc_dir: Path, work: Path, tokenizer: str | None) -> tuple[dict, dict, float, int]:
    """({url: text} kept, {step: CPU s}, CPU s, records read) of the datatrove pipeline."""
    from datatrove.utils import stats as datatrove_stats
    from loguru import logger

    from curate_datatrove import run_datatrove

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    start = cpu_seconds()
    # datatrove's task logger writes every step's stats to stderr: kept in WORK/stderr.log instead
    with cpu_clock(datatrove_stats), open(work / "stderr.log", "w") as log, contextlib.redirect_stderr(log):
        _, steps = run_datatrove(warc_dir, work, tokenizer)
    total = cpu_seconds() - start
    logger.remove()  # the handler datatrove left bound to the closed log
    reader = json.loads((work / "logs" / "filter" / "stats.json").read_text())[0]
    texts = {}
    for path in sorted((work / "out").glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            texts.update((doc["metadata"]["url"], doc["text"]) for doc in map(json.loads, fh))
    return texts, steps, total, reader["stats"]["documents"]["total"]


def datatrove_reader_on_damage(warc_dir: Path) -> dict[str, str]:
    """What datatrove's WarcReader reads of each damaged file: records, and the error it stops at."""
    from datatrove.pipeline.readers import WarcReader

    reader = WarcReader(str(warc_dir), glob_pattern="*.warc.gz")
    result = {}
    for path in sorted(warc_dir.glob("*.warc.gz")):
        count, error = 0, "none"
        try:
            for _ in reader.read_file(path.name):
                count += 1
        except Exception as err:  # noqa: BLE001 - whatever the reader stops at is the figure
            error = f"{type(err).__name__}: {' '.join(str(err).split())[:60]}"
        result[path.name] = f"{count} records, stops at: {error}"
    return result


def stage_rows(stages: dict[str, float], total: float) -> dict[str, float]:
    """{ROWS entry: CPU s}, datatrove's or trident's step names grouped; the rest of `total` as other."""
    rows = Counter()
    for name, seconds in stages.items():
        row = TRIDENT_ROWS.get(name) or next((r for pattern, r in DATATROVE_ROWS if pattern in name), ROWS[-1])
        rows[row] += seconds
    rows[ROWS[-1]] += total - sum(stages.values())
    return dict(rows)


def print_figures(trident: dict, runs: dict) -> None:
    """One line per figure of the trident run (damage, accounting, drop logs, template lines)."""
    left = trident["template lines"]
    print(f"\nrecords read: {trident['records read']}; documents kept: {trident['documents']}")
    print(f"records lost to damage: {trident['lost']}")
    print(f"planted damaged records: {trident['planted']} -> lost == planted: {trident['damage exact']}")
    print(f"accounting check: {'OK' if trident['accounting ok'] else 'FAILED'}")
    print(f"drop-log records: {trident['drop-log records']}, dropped counters: {trident['dropped']} -> "
          f"{'equal' if trident['drop-log records'] == trident['dropped'] else 'DIFFERENT'}")
    print(f"corpus URLs neither kept nor in a drop log: {trident['unaccounted urls']}")
    for scope, suffix in (("all hosts", ""), (f"hosts with >= {MIN_HOST_DOCS} pages", "large hosts ")):
        before, after = left[f"{suffix}before"], left[f"{suffix}after"]
        print(f"template lines in kept documents, {scope}: {before} after extraction, {after} in the output "
              f"(site_lines recall {1 - after / max(before, 1):.3f})")
    before, after = trident["content before site_lines"], trident["content"]
    print("planted content of the kept documents, after extraction -> in the output: "
          + ", ".join(f"{c} {before[c]:.3f} -> {after[c]:.3f}" for c in CATEGORIES))
    for name, run in runs.items():
        if "damage" in run:
            for file, outcome in run["damage"].items():
                print(f"{name} reader on damaged {file}: {outcome}")


def run_all(root: Path, truth: dict, skip_datatrove: bool) -> tuple[dict, dict]:
    """(trident's figures, {pipeline: stages, CPU s, records read, content kept, template lines left})."""
    stats, total = run_trident(root / "warc", root / "trident")
    trident = trident_figures(truth, root / "trident", stats)
    runs = {"trident": {"stages": stage_rows({s["name"]: s["seconds"] for s in stats["stages"]}, total),
                        "cpu_s": total, "records": trident["records read"], "content": trident["content"],
                        "template lines": trident["template lines"]["after"]}}
    if skip_datatrove:
        return trident, runs
    for name, tokenizer, work in (("datatrove", None, "datatrove"), ("datatrove (str.split)", "whitespace", "split")):
        texts, steps, cpu, records = run_datatrove_texts(root / "warc-undamaged", root / work, tokenizer)
        runs[name] = {"stages": stage_rows(steps, cpu), "cpu_s": cpu, "records": records,
                      "content": content_kept(truth, texts), "template lines": template_lines(truth, texts)}
    runs["datatrove"]["damage"] = datatrove_reader_on_damage(root / "warc")
    return trident, runs


def print_pipelines(runs: dict) -> None:
    """The per-stage table, and speed and quality per pipeline with the ratio to datatrove."""
    print_table("CPU seconds per stage", ["stage", *runs],
                [[row, *(round(r["stages"][row], 2) if row in r["stages"] else "-" for r in runs.values())]
                 for row in ROWS])
    for run in runs.values():
        run["records_per_s"] = round(run["records"] / run["cpu_s"], 1)
    base = runs.get("datatrove")
    rows = []
    for name, run in runs.items():
        ratio = round(run["records_per_s"] / base["records_per_s"], 2) if base else "-"
        rows.append([name, run["records"], round(run["cpu_s"], 2), run["records_per_s"], ratio,
                     run["template lines"], *run["content"].values()])
    print_table("whole pipeline, one core (content: share of the unique articles' planted pieces kept)",
                ["pipeline", "records read", "CPU s", "records/s", "x datatrove", "template lines left",
                 *runs["trident"]["content"]], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2000, help="WARC response records (damaged ones added)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--skip-datatrove", action="store_true", help="trident only (datatrove not installed)")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="curate-sites-"))
    for folder in ("warc", "warc-undamaged"):
        shutil.rmtree(root / folder, ignore_errors=True)
    truth = write_sites_corpus(root / "warc", args.records, args.seed, clean=root / "warc-undamaged")
    load_before = load_average()
    trident, runs = run_all(root, truth, args.skip_datatrove)
    print(f"{trident['records read']} response records in {len(list((root / 'warc').glob('*.warc.gz')))} files, "
          f"one core, CPU seconds; load before {load_before}, after {load_average()}")
    print_pipelines(runs)
    print_figures(trident, runs)
    emit_json("curate_sites", {"records": trident["records read"], "trident": trident, "pipelines": runs})


if __name__ == "__main__":
    main()
