"""Language identification backends of the `langid` stage, side by side: documents/s of CPU and
accuracy on labelled text (English recall: named English; "kept": and with a probability at or above
0.5, or the backend's default threshold): the English, German and French pages of the sample WARCs (their planted
article text, as `extract` leaves it), and the same cut into single paragraphs and single sentences
(harder: less text), and the pages of benchmarks/curate_corpus.py's WARC. The baseline is py3langid, measured in the same process; CPU seconds
(time.process_time), best of --rounds.

    python benchmarks/langid.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import html
import re
import tempfile
import time
from pathlib import Path

from common import emit_json, print_table
from trident.curate.document import Document
from trident.curate.extract.langid import DEFAULT_THRESHOLDS
from trident.curate.run.registry import build_stage
from trident.curate.samples.crawl import FRENCH, GERMAN, sample_pages

BACKENDS = ("py3langid", "fasttext")  # the first is the baseline
LABELS = {"english": "en", "exact_duplicate": "en", "near_duplicate": "en", "german": "de", "french": "fr"}


def labelled_texts() -> dict[str, list[tuple[str, str]]]:
    """{granularity: [(text, language)]}: whole pages, paragraphs and sentences."""
    pages = []
    for seed in range(3):
        for page in sample_pages(140, seed):
            if page["kind"] in LABELS:
                article = re.search(r"<article>(.*?)</article>", page["body"].decode(), re.S).group(1)
                paragraphs = [html.unescape(p) for p in re.findall(r"<p>(.*?)</p>", article, re.S)]
                pages.append(("\n".join(paragraphs), LABELS[page["kind"]]))
    paragraphs = [(p, lang) for text, lang in pages for p in text.split("\n") if len(p.split()) >= 8]
    sentences = [(s, lang) for text, lang in paragraphs for s in re.split(r"(?<=[.!?]) ", text)
                 if len(s.split()) >= 5]
    # the foreign samples repeat three paragraphs; keep each foreign text once per granularity
    unique = lambda items: list(dict.fromkeys(items))
    return {"pages": pages, "paragraphs": unique(paragraphs), "sentences": unique(sentences),
            "foreign paragraphs": [(p, "de") for p in GERMAN] + [(p, "fr") for p in FRENCH],
            "corpus pages": corpus_pages()}


def corpus_pages(records: int = 1000) -> list[tuple[str, str]]:
    """The English (random sentences of the language reference: technical, code words), German and
    French pages of benchmarks/curate_corpus.py's WARC, as the default extract stage leaves them."""
    from curate_corpus import write_corpus_warc
    from trident.curate.read.record_log import RecordLog
    from trident.curate.read.shards import read_documents

    with tempfile.TemporaryDirectory() as folder:
        write_corpus_warc(Path(folder) / "cc.warc.gz", records, seed=1)
        docs = list(build_stage("extract", {}).process(read_documents(Path(folder) / "cc.warc.gz", RecordLog())))
    return [(d.text, LABELS[d.meta["url"].split("/")[3]]) for d in docs if d.meta["url"].split("/")[3] in LABELS]


def run_backend(backend: str, items: list[tuple[str, str]], rounds: int) -> tuple[list[tuple[str, float]], float]:
    """((language, probability) per item, best CPU seconds) of the langid stage with `backend`."""
    stage = build_stage("langid", {"backend": backend, "languages": ["en"], "threshold": 0.0})
    stage.setup()  # model loading is start-up, not throughput
    best, predicted = float("inf"), []
    for _ in range(rounds):
        docs = [Document(str(i), text) for i, (text, _) in enumerate(items)]
        start = time.process_time()
        for doc in docs:
            stage.apply(doc)
        best = min(best, time.process_time() - start)
        predicted = [(doc.meta["language"], doc.meta["language_score"]) for doc in docs]
    return predicted, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (best is kept)")
    args = parser.parse_args()
    results, rows = {}, []
    for granularity, items in labelled_texts().items():
        for backend in BACKENDS:
            scored, seconds = run_backend(backend, items, args.rounds)
            predicted = [language for language, _ in scored]
            english = [s for s, (_, lang) in zip(scored, items) if lang == "en"]
            foreign = [p for p, (_, lang) in zip(predicted, items) if lang != "en"]
            kept_at = lambda threshold: sum(p == "en" and s >= threshold for p, s in english) / max(len(english), 1)
            results[(granularity, backend)] = {
                "docs_per_s": len(items) / seconds,
                "accuracy": sum(p == lang for p, (_, lang) in zip(predicted, items)) / len(items),
                "english_recall": kept_at(0.0), "english_kept_at_0.5": kept_at(0.5),
                "english_kept_at_default": kept_at(DEFAULT_THRESHOLDS[backend]),
                "foreign_as_english": sum(p == "en" for p in foreign) / max(len(foreign), 1)}
        base = results[(granularity, BACKENDS[0])]["docs_per_s"]
        for backend in BACKENDS:
            r = results[(granularity, backend)]
            rows.append([granularity, backend, len(items), round(r["docs_per_s"], 1), round(r["docs_per_s"] / base, 2),
                         round(r["accuracy"], 4), round(r["english_recall"], 4), round(r["english_kept_at_0.5"], 4),
                         round(r["english_kept_at_default"], 4), round(r["foreign_as_english"], 4)])
    print_table(f"langid backends (CPU s, best of {args.rounds})",
                ["texts", "backend", "n", "docs/s", "x py3langid", "accuracy", "English recall",
                 "en kept p>=0.5", "en kept p>=default", "foreign as en"], rows)
    emit_json("langid", {f"{g}/{b}": {k: round(v, 4) for k, v in r.items()} for (g, b), r in results.items()})


if __name__ == "__main__":
    main()
