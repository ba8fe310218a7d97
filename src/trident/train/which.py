"""Which documents a training step read, and which steps read a document (`trident data which`).

A step's samples are global indices [first, first + count) of the training stream (metrics.jsonl's
`samples`); the stream is a blend of per-source GPTDatasets whose index arrays are cached beside the
data, so the run's config rebuilds (reads) exactly the same stream. A document is named by
`FILE:LINE` (its source line, from PREFIX.doc_lines.npy) or `PREFIX:INDEX` (its index in PREFIX.bin).
"""
from __future__ import annotations

from pathlib import Path

from trident.text.storage import location

import numpy as np

from trident.config import ConfigError, load_config
from trident.data.build import build_datasets
from trident.data.lineage import batch_documents, find_document
from trident.train.replay import logged_steps
from trident.train.lr_schedule import TrainSchedule


def training_stream(run: Path):
    """The run's training dataset, as its trainer built it (same config, same number of samples)."""
    config = load_config(location(run) / "config.yaml")
    train_samples = sum(TrainSchedule(config.train, config.model.seq_length).batch_sizes())
    train, _ = build_datasets(config.data, config.model.seq_length, train_samples, 0, config.train.seed)
    return train


def which_step(run: str | Path, step: int) -> dict:
    """Every sample of `step`'s global batch with its documents, token spans and sources."""
    logged = logged_steps(location(run))
    if step not in logged or "samples" not in logged[step]:
        raise ConfigError(f"{location(run) / 'metrics.jsonl'}: no step {step} with its samples recorded")
    first, count = logged[step]["samples"]
    documents = batch_documents(training_stream(run), first, count, limit=None)
    return {"run": str(run), "step": step, "samples": [first, count], "documents": documents}


def resolve_document(stream, doc_id: str) -> tuple[str, int]:
    """(prefix, document index) of a document id (record id, URL, `FILE:LINE` or `PREFIX:INDEX`)."""
    for dataset in _sources(stream):
        prefix = str(dataset.indexed.prefix)
        name = doc_id.rpartition(":")[0]
        if name and name != prefix and name in {str(d.indexed.prefix) for d in _sources(stream)}:
            continue  # PREFIX:INDEX of another source
        doc = find_document(prefix, doc_id)
        if doc is not None:
            return prefix, doc
    raise ConfigError(f"document id {doc_id!r} is in none of the run's data.paths "
                      f"(ids: a record id or URL, FILE:LINE, or PREFIX:INDEX)")


def which_doc(run: str | Path, doc_id: str) -> dict:
    """The steps (and samples) whose batches held the document."""
    stream = training_stream(run)
    prefix, doc = resolve_document(stream, doc_id)
    samples = np.sort(_samples_holding(stream, prefix, doc))
    logged = logged_steps(location(run))
    steps = []
    for step, record in sorted(logged.items()):
        first, count = record.get("samples", (0, 0))
        hit = samples[(samples >= first) & (samples < first + count)]
        if len(hit):
            steps.append({"step": step, "samples": hit.tolist()})
    return {"run": str(run), "document": doc_id, "prefix": prefix, "index": doc, "steps": steps}


def _sources(stream) -> list:
    return list(stream.datasets) if hasattr(stream, "datasets") else [stream]


def _samples_holding(stream, prefix: str, doc: int) -> np.ndarray:
    """Global stream indices of every sample whose window holds `doc` (vectorised over the index arrays)."""
    found = []
    for position, dataset in enumerate(_sources(stream)):
        if str(dataset.indexed.prefix) != prefix:
            continue
        places = np.nonzero(np.asarray(dataset.doc_idx) == doc)[0]  # where the document sits in the stream
        starts = np.asarray(dataset.sample_idx)[:, 0]
        windows = set()
        for place in places:  # windows j whose positions starts[j]..starts[j + 1] cover this place
            j = min(int(np.searchsorted(starts, place, side="right")) - 1, len(starts) - 2)
            while j >= 0 and starts[j + 1] >= place:
                windows.add(int(j))
                j -= 1
        local = np.nonzero(np.isin(np.asarray(dataset.shuffle_idx)[:len(dataset)], list(windows)))[0]
        if hasattr(stream, "datasets"):  # blend: the global samples that map to these local ones
            mask = (np.asarray(stream.dataset_index) == position) & np.isin(np.asarray(stream.dataset_sample_index), local)
            found.append(np.nonzero(mask)[0])
        else:
            found.append(local)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
