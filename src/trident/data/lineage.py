"""Where each document of an indexed dataset came from, and which documents a training sample holds.

`trident tokenize` writes PREFIX.doc_lines.npy beside PREFIX.bin/.idx: one row per document, (index of
its input file in PREFIX.stats.json's `inputs`, 1-based line), 12 bytes a document; and, when the
records carry them (curation's output does: its stable id, source file and record or WARC record id,
and the URL), PREFIX.doc_ids.jsonl, one `{"id", "url"}` line per document. With them a sample (a
global index of the training stream) resolves to its documents, their ids and source lines: a loss
spike names what it trained on, and a takedown request can name documents by id.
"""
from __future__ import annotations

import json
import os
from array import array
from pathlib import Path

import numpy as np

from trident.text.storage import local_copy, location

SUFFIX, IDS_SUFFIX = "doc_lines.npy", "doc_ids.jsonl"


def lines_file(prefix) -> Path:
    return location(f"{prefix}.{SUFFIX}")


def ids_file(prefix) -> Path:
    return location(f"{prefix}.{IDS_SUFFIX}")


class DocumentLines:
    """Collects (input file, line) per document while tokenizing; `save()` writes the sidecar atomically."""

    def __init__(self, prefix, inputs: list):
        self.prefix, self.index = Path(prefix), {str(path): k for k, path in enumerate(inputs)}
        self.files, self.lines, self.ids = array("i"), array("q"), []

    def add(self, path, line: int, identity: dict | None = None) -> None:
        self.files.append(self.index[str(path)])
        self.lines.append(line)
        self.ids.append(identity)

    def save(self) -> None:
        table = np.stack([np.frombuffer(self.files, dtype=np.int32).astype(np.int64),
                          np.frombuffer(self.lines, dtype=np.int64)], axis=1) if self.lines else np.zeros((0, 2), np.int64)
        final = lines_file(self.prefix)
        tmp = final.with_name(final.name + ".tmp.npy")
        np.save(tmp, table)
        os.replace(tmp, final)
        if any(self.ids):
            ids, tmp = ids_file(self.prefix), ids_file(self.prefix).with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(i or {}) + "\n" for i in self.ids))
            os.replace(tmp, ids)


class DocumentSources:
    """Reads a prefix's sidecar; `where(doc)` is "FILE:LINE", or None for data tokenized without one."""

    def __init__(self, prefix):
        self.prefix = location(prefix)
        path, stats = lines_file(prefix), location(f"{prefix}.stats.json")
        self.table = (np.load(local_copy(path, "index"), mmap_mode="r", allow_pickle=False)
                      if path.exists() else None)
        self.inputs = json.loads(stats.read_text()).get("inputs", []) if stats.exists() else []
        self._ids: list | None = None
        self._names: dict | None = None

    @property
    def ids(self) -> list[dict]:
        """Per document its record's {"id", "url"} ([] without PREFIX.doc_ids.jsonl); read on first use."""
        if self._ids is None:
            path = ids_file(self.prefix)
            self._ids = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return self._ids

    @property
    def names(self) -> dict[str, int]:
        """Every `FILE:LINE`, record id and URL -> its document; built once, on first use."""
        if self._names is None:
            self._names = {}
            if self.table is not None:
                self._names |= {f"{self.inputs[f] if f < len(self.inputs) else f'input {f}'}:{line}": doc
                                for doc, (f, line) in enumerate(np.asarray(self.table).tolist())}
            self._names |= {value: doc for doc, ident in enumerate(self.ids) for value in ident.values()}
        return self._names

    def lookup(self, doc_id: str, count: int | None = None) -> int | None:
        """The document an id names: `PREFIX:INDEX` or a bare index (below `count`, the number of
        documents), else a `FILE:LINE`, record id or URL; None when it names none."""
        name, _, number = doc_id.rpartition(":")
        if number.isdigit() and name in ("", str(self.prefix)):
            count = count if count is not None else (len(self.table) if self.table is not None else None)
            return int(number) if count is None or int(number) < count else None
        return self.names.get(doc_id)

    def identity(self, doc: int) -> dict:
        """The document's own id and URL, when its record had them ({} otherwise)."""
        return self.ids[doc] if 0 <= doc < len(self.ids) else {}

    def where(self, doc: int) -> str | None:
        if self.table is None or not 0 <= doc < len(self.table):
            return None
        file, line = (int(v) for v in self.table[doc])
        return f"{self.inputs[file] if file < len(self.inputs) else f'input {file}'}:{line}"


def find_document(prefix, doc_id: str) -> int | None:
    """The index of the document `doc_id` names in PREFIX (see DocumentSources.lookup)."""
    return DocumentSources(prefix).lookup(doc_id)


def sample_documents(dataset, index: int, sources: dict | None = None) -> list[dict]:
    """The documents of training sample `index`: [{sample, prefix, document, tokens: [first, end], source}].
    `dataset` is a GPTDataset or a BlendedDataset of them; `sources` caches DocumentSources by prefix."""
    sources = {} if sources is None else sources
    sample = index
    if hasattr(dataset, "source"):  # a blend: find the dataset and its own index
        dataset, index = dataset.source(index)
    prefix = str(dataset.indexed.prefix)
    if prefix not in sources:
        sources[prefix] = DocumentSources(prefix)
    return [{"sample": sample, "prefix": prefix, "document": doc, "tokens": [begin, end],
             "source": sources[prefix].where(doc), **sources[prefix].identity(doc)}
            for doc, begin, end in dataset.sample_spans(index)]


def batch_documents(dataset, start: int, count: int, limit: int | None = 64) -> list[dict]:
    """The documents of samples [start, start + count), at most `limit` of them (None: all; in sample
    order); [] for a dataset that cannot tell (e.g. synthetic samples)."""
    if not (hasattr(dataset, "sample_spans") or hasattr(dataset, "source")):
        return []
    found, sources = [], {}
    for index in range(start, start + count):
        found.extend(sample_documents(dataset, index, sources))
        if limit is not None and len(found) >= limit:
            return found[:limit]
    return found
