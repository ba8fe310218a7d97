"""Takedown: a copy of an indexed dataset without some documents, and a report of what changed.

`trident data remove --prefix P --ids FILE --out P2` reads ids (one a line: a record id
or URL as curation wrote them, `FILE:LINE` of a tokenized source line, `P:INDEX`, or a bare document
index; `#` comments), writes P2.bin/.idx, its lineage sidecars and P2.stats.json without those documents, and P2.removal.json: documents and
tokens removed, every id that matched nothing (counted and listed, never dropped silently), and the
first document whose index changed. P2 is a new prefix: its split, sample and blend indices are built
for it on first use, so training on P2 cannot reach a removed document.
"""
from __future__ import annotations

import json
from pathlib import Path

from trident.data.indexed import IndexedDataset, IndexedDatasetBuilder
from trident.data.lineage import DocumentLines, DocumentSources, lines_file
from trident.text.storage import location, staged_prefix

OUTPUT_SUFFIXES = ("bin", "idx", "stats.json", "doc_lines.npy", "doc_ids.jsonl", "removal.json")


class TakedownError(ValueError):
    """An unusable request: a missing prefix, an unreadable id file, outputs that already exist."""


def read_ids(path: Path) -> list[str]:
    try:
        lines = location(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise TakedownError(f"{path}: cannot read the ids ({error})") from error
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def resolve_ids(prefix: Path, ids: list[str], num_documents: int) -> tuple[set[int], list[str]]:
    """(document indices to remove, the ids that matched no document). An id is a record id or URL,
    `FILE:LINE`, `PREFIX:INDEX` or a bare index (DocumentSources.lookup, its table built once)."""
    sources, found, missing = DocumentSources(prefix), set(), []
    for doc_id in ids:
        doc = sources.lookup(doc_id, num_documents)
        if doc is None:
            missing.append(doc_id)
        else:
            found.add(doc)
    return found, missing


def remove_documents(prefix: str | Path, ids_file: str | Path, out: str | Path) -> dict:
    """Write OUT without the documents `ids_file` names; returns (and writes) the removal report.
    PREFIX and OUT may be fsspec URLs (OUT is written locally, then uploaded with its .idx last)."""
    prefix = location(prefix)
    existing = [f"{out}.{s}" for s in OUTPUT_SUFFIXES if location(f"{out}.{s}").exists()]
    if existing:
        raise TakedownError(f"{existing[0]} already exists; choose another --out")
    try:
        source = IndexedDataset(prefix)
    except (OSError, ValueError) as error:
        raise TakedownError(f"--prefix {prefix}: {error}") from error
    ids = read_ids(ids_file)
    removed, missing = resolve_ids(prefix, ids, len(source))
    with staged_prefix(out, commit_suffix=".idx") as stage:
        counts = _write_without(prefix, source, removed, stage, str(out))
        report = {"prefix": str(prefix), "out": str(out), "ids": len(ids), "documents_removed": len(removed),
                  "tokens_removed": int(sum(int(source.sizes[d]) for d in removed)),
                  "not_found": len(missing), "not_found_ids": missing[:1000], **counts,
                  # documents from here on have new indices (and every sample index built over them changes)
                  "first_changed_document": min(removed) if removed else None,
                  "removed_documents": sorted(removed)}
        Path(f"{stage}.removal.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def _write_without(prefix: Path, source: IndexedDataset, removed: set[int], stage: Path, target: str) -> dict:
    """STAGE.bin/.idx, its sidecars and stats without `removed` (the stats name `target`); returns the counts."""
    stats_path = location(f"{prefix}.stats.json")
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    sources = DocumentSources(prefix)
    lines = sources.table
    builder, kept_lines = IndexedDatasetBuilder(stage, source.dtype), DocumentLines(stage, stats.get("inputs", []))
    try:
        for doc in range(len(source)):
            if doc in removed:
                continue
            builder.add_document(source.get(doc))
            if lines is not None:
                kept_lines.files.append(int(lines[doc][0]))
                kept_lines.lines.append(int(lines[doc][1]))
                kept_lines.ids.append(sources.identity(doc) or None)
        builder.finalize()
    except BaseException:
        builder.abort()
        raise
    if lines is not None:
        kept_lines.save()
    counts = {"documents": builder.num_documents, "tokens": builder.num_tokens}
    Path(f"{stage}.stats.json").write_text(json.dumps(
        stats | {"output_prefix": target, **counts, "removed_from": str(prefix),
                 "has_doc_lines": lines_file(stage).exists()}, indent=2) + "\n")
    return counts
