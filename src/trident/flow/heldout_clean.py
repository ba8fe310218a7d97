"""With `eval.heldout`, every training source decontaminated against the held-out documents.

The holdout stage keeps its documents out of its own source's output, but a copy or near-copy of one
can still be trained on: a crawl of the same site in another source of the blend, or a near-copy in
the same source that dedup did not merge. So each source's curated shards (the held-out source's
included) go through curation's `decontaminate` stage (13-gram rule, trident.curate.decontaminate)
with the held-out documents as its task texts, into OUT/decontaminated/NAME/, which the tokenizer and
tokenize stages read. Its counters say how many documents were cut or dropped and how many spans cut.
An n-gram found in `frequent_docs` (10) or more different documents of one source counts as common
language and is kept (a licence line, boilerplate): such n-grams are counted, never hidden. A document
that copies a held-out document (holds half its 13-grams, or 50 of them: a passage of 62 words) does
not count towards that, so no held-out document's text is trained on however often it was copied.
"""
from __future__ import annotations

import json
from pathlib import Path

from trident.flow.spec import Flow, Source

FREQUENT_DOCS = 10  # a 13-gram in this many documents of one source is common language, not a leak
COPY_SHARE, COPY_NGRAMS = 0.5, 50  # a document with this share, or number, of a held-out text's 13-grams copies it

TASK = "heldout"  # the name the held-out documents carry as the stage's one task


def documents_file(out: Path) -> Path:
    """The held-out documents, one {"text"} a line (written by the heldout stage)."""
    return out / "heldout" / "documents.jsonl"


def write_documents(out: Path, texts: list[str]) -> Path:
    path = documents_file(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    return path


def folder(out: Path, source: Source) -> Path:
    return out / "decontaminated" / source.name


def _shards(root: Path) -> list[Path]:
    return sorted(root.glob("shard-*.jsonl.zst"))


def curated_shards(out: Path, source: Source) -> list[Path]:
    return _shards(out / "curated" / source.name)


def training_shards(flow: Flow, out: Path, source: Source) -> list[Path]:
    """The shards the tokenizer and tokenize stages read: decontaminated with eval.heldout, else curated."""
    return _shards(folder(out, source) if flow.eval.heldout else out / "curated" / source.name)


def decontaminate(flow: Flow, out: Path, source: Source, resume: bool) -> dict:
    """The source's curated shards with the held-out documents' 13-grams cut out -> OUT/decontaminated/NAME."""
    from trident.curate.run.pipeline import run_pipeline

    settings = flow.curate_of(source)
    stats = run_pipeline({"stages": [stage(documents_file(out))], "progress": settings.progress},
                         _shards(out / "curated" / source.name),
                         folder(out, source), workers=settings.workers, overwrite=not resume)
    print(f"{source.name}: {summary(stats)}", flush=True)
    return stats


def stage(documents: Path) -> dict:
    """The decontaminate stage's settings against the held-out documents (one {"text"} a line)."""
    return {"stage": "decontaminate", "frequent_docs": FREQUENT_DOCS, "copy_share": COPY_SHARE,
            "copy_ngrams": COPY_NGRAMS, "tasks": [{"name": TASK, "path": str(documents), "fields": ["text"]}]}


def counts(stats: dict) -> dict:
    """The decontaminate stage's counts of one source's run: documents in, cut, dropped, spans, ignored n-grams."""
    counters = next(s["counters"] for s in stats["stages"] if s["name"] == "decontaminate")
    return {"in": counters.get("in", 0), "touched": counters.get(f"touched:{TASK}", 0),
            "cut": counters.get("documents_cleaned", 0), "spans": counters.get("cuts", 0),
            "dropped": counters.get("dropped:contaminated", 0) + counters.get("dropped:too_many_splits", 0),
            "out": stats["output"]["documents"], "frequent": counters.get("frequent_ngrams_ignored", 0),
            "copies": counters.get("copies_of_task_texts", 0)}


def summary(stats: dict) -> str:
    c = counts(stats)
    return (f"{c['touched']} of {c['in']} documents held held-out 13-grams: {c['cut']} cut ({c['spans']} spans "
            f"removed), {c['dropped']} dropped; {c['out']} documents left; {c['copies']} copied a held-out document; "
            f"{c['frequent']} held-out 13-grams kept as common language (in >= {FREQUENT_DOCS} documents that "
            f"do not copy one)")


def report_section(flow: Flow, out: Path, done: set[str]) -> str | None:
    """The report's table of what decontamination against the held-out documents removed, per source."""
    if not flow.eval.heldout:
        return None
    lines = ["Every source was decontaminated against the held-out documents before tokenization (the "
             "13-gram rule of task decontamination; trident's docs/flow.md).", "",
             "| source | documents in | with held-out 13-grams | cut | spans removed | dropped | left | "
             "13-grams kept as common | copies of a held-out document |", "|---|---|---|---|---|---|---|---|---|"]
    for source in flow.sources:
        if f"decontaminate:{source.name}" not in done:
            lines.append(f"| {source.name} | not run | | | | | | | |")
            continue
        c = counts(json.loads((folder(out, source) / "stats.json").read_text()))
        lines.append(f"| {source.name} | {c['in']} | {c['touched']} | {c['cut']} | {c['spans']} | {c['dropped']} | "
                     f"{c['out']} | {c['frequent']} | {c['copies']} |")
    return "\n".join(lines)
