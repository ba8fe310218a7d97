"""A read task: raw input files (WARC, HTML, JSONL) read into one work shard, with its drop log and
completion marker, as the read phase writes it; a global stage that reads the raw inputs itself
(GlobalStage.reads_raw) runs it as its own first pass."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

from trident.curate.document import Document
from trident.curate.droplog import DropLog, log_path
from trident.curate.read.doc_ids import DocumentIds, Naming, claims_path, save_claims
from trident.curate.read.record_log import RecordLog
from trident.curate.read.shards import ShardWriter, input_format, read_documents, read_shard, record_items, record_line
from trident.text.atomic import write_json_atomic
from trident.text.storage import location

MARKER_SUFFIX = ".done.json"  # a finished unit of work's completion marker, next to its output


def timed(docs: Iterator, spent: list[float], slot: int) -> Iterator:
    """Pass `docs` through, adding the time spent producing each item to spent[slot] (this
    includes the time of the generators upstream; stream_shard subtracts it)."""
    iterator = iter(docs)
    while True:
        start = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            spent[slot] += time.perf_counter() - start
            return
        spent[slot] += time.perf_counter() - start
        yield item


def raw_inputs(task: dict) -> list[tuple[Path, str | None]]:
    """The raw input files a read task reads into its one shard, in order, with their datasets."""
    return [(location(path), dataset) for path, dataset in task.get("group") or [(task["input"], task["dataset"])]]


def raw_sources(task: dict) -> list[tuple[Path, str | None, Naming]]:
    """``raw_inputs`` with how each file's documents are named: the file's name in the run (the
    task's `names`; its own name without them) and the ids the task has handed out (shared; noted
    in their claims where the run has other read tasks, read/run_ids.py)."""
    ids, names = DocumentIds(record=bool(task.get("claims"))), task.get("names") or []
    return [(path, dataset, Naming(names[i] if i < len(names) and names[i] else path.name, ids))
            for i, (path, dataset) in enumerate(raw_inputs(task))]


def fresh_drop_log(output: str) -> DropLog:
    """The drop log of the shard `output`, started afresh (an earlier attempt's is replaced)."""
    path = log_path(output)
    path.unlink(missing_ok=True)
    return DropLog(path)


def read_raw_documents(task: dict) -> Iterator[Document]:
    """The documents of a read task (``stream_tasks`` with no stages, ``read_raw``, PLAIN_SUFFIX), for
    a global stage that reads the raw inputs in its own first pass (``GlobalStage.reads_raw``): each
    is written to the task's output shard as ``stream_shard`` writes it, with its drop log, and the
    completion marker is written at the end, so the read's counters, a resumed run and later steps
    see a finished read phase. An input read before (its marker and shard exist) is read from its
    shard. The shard is plain JSONL: the stage reads it once more, to copy its kept lines, and
    compressing it and reading it back cost more than its bytes on disk while the run lasts."""
    output = location(task["output"])
    if read_before(task):
        yield from read_shard(output)
        return
    drops = fresh_drop_log(task["output"])
    log = RecordLog(strict=task["strict"], drops=drops)
    spent = [0.0]
    sources = raw_sources(task)
    with ShardWriter(output, None) as writer:
        for line, doc in timed(_raw_items(sources, task, log), spent, 0):
            writer.write_line(line)
            yield doc
    drops.close()
    save_task_claims(task, sources)
    result = {"read": dict(log.counters), "stages": [], "errors": log.errors, "written": writer.count,
              "seconds": [round(spent[0], 6)]}
    write_json_atomic(location(task["output"] + MARKER_SUFFIX), result)


def read_before(task: dict) -> bool:
    """Whether a read task finished in an earlier attempt: its marker, shard and (where it notes
    them) claims exist."""
    marker, output = location(task["output"] + MARKER_SUFFIX), location(task["output"])
    return marker.exists() and output.exists() and (not task.get("claims") or claims_path(output).exists())


def save_task_claims(task: dict, sources: list[tuple[Path, str | None, Naming]]) -> None:
    """Write the ids a read task handed out beside its shard, where the run has other read tasks."""
    claims = sources[0][2].ids.claims if sources else None
    if claims is not None:
        save_claims(task["output"], claims)


def _raw_items(sources: list, task: dict, log: RecordLog) -> Iterator[tuple[bytes, Document]]:
    """(shard line, Document) of every good record of a raw input, as ``stream_shard`` would write them."""
    for path, dataset, naming in sources:
        if input_format(path) == "jsonl":
            for line, record in record_items(path, log, dataset, task["max_doc_bytes"], naming.name, naming.ids):
                yield line, Document.from_json(record, record["id"])
            continue
        for doc in read_documents(path, log, dataset, task["max_doc_bytes"], naming.name, naming.ids):
            yield record_line(doc), doc
