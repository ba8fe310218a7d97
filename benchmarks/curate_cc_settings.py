"""What curate-cc's 64-piece length floor and langid `min_margin` do on crawl-like corpora, precision
of the kept documents as well as recall.

Both settings were chosen on real documentation pages (benchmarks/curate_real_sites.py: pages of
64-127 GPT-2 pieces that are whole pages; code-heavy English pages fastText puts under 0.3). Here
curate-cc runs as shipped and with each setting put back to MT-NLG's / the backend's (floor 128,
min_margin null), on three Common-Crawl-like WARC corpora whose every record's kind is known:

    sample     trident.curate.samples.crawl.write_sample_warc (the demo's crawl): reference articles, copies,
               German, French, spam, tiny pages, 404, non-HTML
    crawl      benchmarks/curate_corpus.py: 3,000 records in five page layouts, the same kinds
    sites      benchmarks/curate_sites_corpus.py: 2,000 records from 66 templated hosts, damaged records

    python benchmarks/curate_cc_settings.py [--records 3000] [--site-records 2000] [--out DIR]

Per corpus and variant: documents kept; precision (the share of kept documents that are English
articles or copies of one: the kinds a corpus of English prose wants; copies are dedup's matter and
counted apart: copies left beyond one an article); recall of the unique English articles (an article
counts when any copy of it is kept); and, for the shipped variant, the kinds of the
documents each setting keeps that the stricter value would drop, and each kind's length in pieces.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from common import emit_json, load_average, print_table
from trident.curate.filters.heuristics import gpt2_pieces
from trident.curate.run.pipeline import run_pipeline
from trident.curate.read.shards import read_shard

WANTED = ("english", "exact_duplicate", "near_duplicate")  # English prose (copies: dedup's to remove)
VARIANTS = {"shipped (64, margin 2.0)": [], "floor 128": ["stages.min_length.min_tokens=128"],
            "min_margin null": ["stages.langid.min_margin=null"],
            "floor 128, min_margin null": ["stages.min_length.min_tokens=128", "stages.langid.min_margin=null"]}


def corpora(root: Path, records: int, site_records: int, seed: int) -> dict[str, tuple[Path, dict, int]]:
    """{name: (input, {url: (kind, group)}, unique English articles)} of the three corpora, under ROOT."""
    from curate_corpus import write_corpus_warc
    from curate_sites_corpus import write_sites_corpus
    from trident.curate.samples.crawl import sample_pages, write_sample_warc

    write_sample_warc(root / "sample.warc.gz", n_docs=120, seed=seed)
    sample = {p["url"]: (p["kind"], _sample_group(p["url"], p["kind"], 120)) for p in sample_pages(120, seed)}
    crawl = write_corpus_warc(root / "crawl.warc.gz", records, seed)  # kind and group are in each URL
    pages = write_sites_corpus(root / "sites", site_records, seed)
    sites = {url: (page.kind, page.group) for url, page in pages.items()}
    english = lambda truth: sum(kind == "english" for kind, _ in truth.values())  # noqa: E731
    return {"sample": (root / "sample.warc.gz", sample, english(sample)),
            "crawl": (root / "crawl.warc.gz", {}, crawl["english"]), "sites": (root / "sites", sites, english(sites))}


def _sample_group(url: str, kind: str, articles: int) -> int:
    """The article a sample page carries: docs/I and mirror/I carry article I, copy/I article N-1-I."""
    index = int(url.rsplit("/", 1)[1]) if kind in WANTED else -1
    return articles - 1 - index if kind == "near_duplicate" else index


def truth_of(url: str, truth: dict) -> tuple[str, int]:
    if url in truth:
        return truth[url]
    kind, group = url.split("/")[3:5]
    return kind, int(group)


def run(source: Path, out: Path, overrides: list[str]) -> tuple[dict[str, str], dict]:
    """url -> text of the documents curate-cc keeps with `overrides`, and the run's langid counters."""
    shutil.rmtree(out, ignore_errors=True)
    stats = run_pipeline("curate-cc", [source], out, workers=1, overrides=["progress=false", *overrides])
    langid = next(s["counters"] for s in stats["stages"] if s["name"] == "langid")
    kept = {doc.meta["url"]: doc.text for path in sorted(out.glob("shard-*.jsonl.zst")) for doc in read_shard(path)}
    return kept, langid


def score(kept: dict[str, str], truth: dict, articles: int) -> dict:
    kinds = Counter(truth_of(url, truth)[0] for url in kept)
    groups = {truth_of(url, truth)[1] for url in kept if truth_of(url, truth)[0] in WANTED}
    wanted = sum(kinds[k] for k in WANTED)
    return {"kept": len(kept), "precision": round(wanted / max(1, len(kept)), 4),
            "recall": round(len(groups) / articles, 4), "copies left": wanted - len(groups),
            "other kinds kept": dict(sorted((k, n) for k, n in kinds.items() if k not in WANTED))}


def gained(shipped: dict[str, str], strict: dict[str, str], truth: dict) -> dict:
    """The kinds, and length range in pieces, of the documents the shipped setting keeps and the strict drops."""
    extra = [url for url in shipped if url not in strict]
    kinds = Counter(truth_of(url, truth)[0] for url in extra)
    pieces = [gpt2_pieces(shipped[url]) for url in extra]
    return {"documents": len(extra), "kinds": dict(kinds), "pieces": [min(pieces), max(pieces)] if pieces else []}


def lengths(kept: dict[str, str], truth: dict) -> dict:
    """Per kind: the fewest and most pieces of its kept documents."""
    by_kind: dict[str, list[int]] = {}
    for url, text in kept.items():
        by_kind.setdefault(truth_of(url, truth)[0], []).append(gpt2_pieces(text))
    return {kind: [min(v), max(v)] for kind, v in sorted(by_kind.items())}


def drops(out: Path, truth: dict) -> dict:
    """Per stage (min_length, langid) and kind: the range of the dropped documents' scores (pieces; the
    top language's probability), i.e. how far the corpus's dropped pages sit from the two settings."""
    from trident.curate.droplog import read_log

    found: dict[str, dict[str, list[float]]] = {}
    for log in sorted((out / "drops").rglob("*.drops.jsonl.zst")):
        for record in read_log(log):
            if record["stage"] in ("min_length", "langid") and "score" in record:
                kind = truth_of(record["url"], truth)[0]
                found.setdefault(record["stage"], {}).setdefault(kind, []).append(record["score"])
    return {stage: {kind: [min(v), max(v), len(v)] for kind, v in sorted(kinds.items())}
            for stage, kinds in found.items()}


def measure(name: str, source: Path, truth: dict, articles: int, work: Path) -> dict:
    runs = {variant: run(source, work / name / str(i), overrides)
            for i, (variant, overrides) in enumerate(VARIANTS.items())}
    shipped = runs["shipped (64, margin 2.0)"][0]
    return {"variants": {variant: {**score(kept, truth, articles), "kept:margin": langid.get("kept:margin", 0)}
                         for variant, (kept, langid) in runs.items()},
            "floor 64 adds": gained(shipped, runs["floor 128"][0], truth),
            "min_margin adds": gained(shipped, runs["min_margin null"][0], truth),
            "lengths kept (shipped)": lengths(shipped, truth),
            "dropped, [lowest, highest score, documents] (shipped)": drops(work / name / "0", truth)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=3000, help="records of the crawl corpus")
    parser.add_argument("--site-records", type=int, default=2000, help="records of the sites corpus")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="curate-cc-settings-"))
    results, before = {}, load_average()
    for name, (source, truth, articles) in corpora(root / "inputs", args.records, args.site_records, args.seed).items():
        results[name] = measure(name, source, truth, articles, root / "runs")
        rows = [[variant, *(r[k] for k in ("kept", "precision", "recall", "copies left", "kept:margin")),
                 r["other kinds kept"] or "-"] for variant, r in results[name]["variants"].items()]
        print_table(f"{name}: curate-cc variants", ["variant", "kept", "precision", "recall (unique English)",
                                                    "copies left", "kept:margin", "other kinds kept"], rows)
        for key in ("floor 64 adds", "min_margin adds", "lengths kept (shipped)",
                    "dropped, [lowest, highest score, documents] (shipped)"):
            print(f"{name}: {key}: {results[name][key]}")
    emit_json("curate_cc_settings", {"seed": args.seed, "records": args.records, "site_records": args.site_records,
                                     "corpora": results, "machine_before": before})


if __name__ == "__main__":
    main()
