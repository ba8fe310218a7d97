"""A shard written again without its dropped rows (exact dedup, fuzzy dedup, site lines): kept lines
copied byte for byte, dropped ones decoded only for the drop log. A duplicate's record names the
copy kept in its place and their similarity: {"kept": ID, "similarity": 0.83}.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from trident.curate.dedup.components import sorted_distinct
from trident.curate.dedup.keys import split_keys
from trident.curate.dedup.partitions import load_partition
from trident.curate.document import CurateError
from trident.curate.droplog import DropLog, log_path
from trident.curate.read.shard_lines import parse_document, shard_lines
from trident.curate.read.shards import LEVEL, ShardWriter, output_level, read_shard, write_shard
from trident.curate.stage import Executor, GlobalStage, output_paths
from trident.text.compressed import open_binary
from trident.text.storage import load_array, location

KEPT_LANGUAGE = "duplicates_of_language:"  # counter prefix: duplicates dropped, by their kept copy's language


def drop_records(keys: np.ndarray, kept_ids: np.ndarray, similarity: np.ndarray) -> np.ndarray:
    """Structured (key, kept, similarity) records: the dropped documents, the id of the copy each
    one was dropped for and the Jaccard of the two (1.0 for exact copies)."""
    kept_ids = np.asarray(kept_ids, dtype=str)
    out = np.empty(len(keys), dtype=[("key", "u8"), ("kept", f"U{max(kept_ids.dtype.itemsize // 4, 1)}"),
                                     ("similarity", "f4")])
    out["key"], out["kept"], out["similarity"] = keys, kept_ids, similarity
    return out


def row_notes(records: np.ndarray) -> dict[int, dict]:
    """{row: {"kept": id, "similarity": s}} of ``drop_records`` of one shard: the drop log's extra fields."""
    rows = split_keys(records["key"])[1].tolist()
    return {row: {"kept": kept, "similarity": round(float(similarity), 4)}
            for row, kept, similarity in zip(rows, records["kept"].tolist(), records["similarity"].tolist())}


def copy_without(src: str, dst: str, drop: set[int] | dict[int, dict], reason: str, stage: str,
                 level: int = LEVEL) -> Counter:
    """Copy shard ``src`` to ``dst`` (zstd ``level``) without the rows in ``drop`` (counted as
    ``dropped:<reason>`` and written to ``dst``'s drop log, with ``drop[row]``'s fields when it is a dict)."""
    notes = drop if isinstance(drop, dict) else {}
    counters: Counter = Counter()

    def kept(drops: DropLog):
        for row, doc in enumerate(read_shard(location(src))):
            counters["in"] += 1
            counters["bytes_in"] += doc.nbytes
            if row in drop:
                counters[f"dropped:{reason}"] += 1
                drops.add(doc.id, str(doc.meta.get("url", "")), stage, reason, **notes.get(row, {}))
                continue
            counters["out"] += 1
            counters["bytes_out"] += doc.nbytes
            yield doc

    with DropLog(log_path(dst)) as drops:
        write_shard(location(dst), kept(drops), level)
    if counters[f"dropped:{reason}"] != len(drop):
        raise CurateError(f"{src}: {len(drop)} rows marked {reason}, but {counters[f'dropped:{reason}']} found")
    return counters


def drop_lists(dropped: np.ndarray, n_shards: int) -> list[list[int]]:
    """Sorted row lists per shard from an array of ``doc_key`` values."""
    shards, rows = split_keys(dropped)
    out: list[list[int]] = [[] for _ in range(n_shards)]
    for s, r in zip(shards.tolist(), rows.tolist()):
        out[s].append(r)
    return [sorted(rows) for rows in out]


def drop_files_task(job: dict) -> Counter:
    """Shard ``job["src"]`` copied to ``job["dst"]`` without the rows its drop files list (files
    under WORK/drops/s<shard>/, written worker to worker by ``job["stage"]``'s last reduce step);
    with ``job["sizes"]`` (every row's text bytes, saved when it was read) kept lines are copied
    as they are (``filter_lines_task``), else decoded and written again."""
    dropped = load_partition(location(job["work"]) / "drops" / f"s{job['shard']:06d}")
    rows = {} if dropped is None else row_notes(dropped) if dropped.dtype.names else set(split_keys(dropped)[1].tolist())
    if "sizes" in job:
        return filter_lines_task({"src": job["src"], "dst": job["dst"], "drop": sorted(rows), "reason": "duplicate",
                                  "stage": job["stage"], "sizes": job["sizes"], "level": job.get("level", LEVEL),
                                  "notes": rows if isinstance(rows, dict) else {}})
    return copy_without(job["src"], job["dst"], rows, "duplicate", job["stage"], job.get("level", LEVEL))


def _whole_lines(path: Path) -> tuple[bytes, np.ndarray] | None:
    """(the shard's bytes, the offset just past each line's newline) when every line is a record as
    trident writes them (starting "{", ending "\n" alone); None otherwise, or when the file does
    not read whole: the line-by-line copy then reads it and names what is wrong."""
    try:
        with open_binary(path) as handle:
            data = handle.read()
    except (OSError, ValueError):
        return None
    found, at, find = [], 0, data.find
    while (at := find(b"\n", at) + 1) > 0:  # bytes.find per line: no array the size of the shard
        found.append(at)
    ends = np.array(found, dtype=np.int64)
    if len(ends) == 0 or ends[-1] != len(data):
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    if not (buf[np.r_[0, ends[:-1]]] == ord("{")).all() or (buf[ends - 2] == ord("\r")).any():
        return None
    return data, ends


def _filter_whole(src: Path, writer: ShardWriter, drops: DropLog, data: bytes, ends: np.ndarray,
                  drop: np.ndarray, job: dict) -> int:
    """``filter_lines_task``'s copy of a shard read whole: each run of kept lines is one slice (a
    few Python calls a shard, not several a line); only dropped lines are decoded, for the log."""
    starts = np.r_[0, ends[:-1]]
    for row in np.flatnonzero(drop).tolist():  # row r is line r + 1: a shard read whole has no blank line
        doc = parse_document(src, row + 1, data[starts[row] : ends[row] - 1])
        note = job.get("notes", {}).get(row, {})
        drops.add(doc.id, str(doc.meta.get("url", "")), job["stage"], job["reason"], **note)
    view = memoryview(data)
    edges = np.flatnonzero(np.diff(np.r_[0, (~drop).view(np.int8), 0])).tolist()  # kept runs: start, stop, ...
    for first, stop in zip(edges[0::2], edges[1::2]):
        base = starts[first]
        writer.write_joined(view[base : ends[stop - 1]], ends[first:stop] - base)
    return len(ends)


def _filter_line_by_line(src: Path, writer: ShardWriter, drops: DropLog, drop: np.ndarray, job: dict) -> int:
    """``filter_lines_task``'s copy of any shard ``read_shard`` reads, one line at a time; the rows it read."""
    rows = 0
    for row, (number, data) in enumerate(shard_lines(src)):
        if row < len(drop) and not drop[row]:
            writer.write_line(data)
        elif row < len(drop):  # only dropped lines are decoded, for the log
            doc = parse_document(src, number, data)
            note = job.get("notes", {}).get(row, {})
            drops.add(doc.id, str(doc.meta.get("url", "")), job["stage"], job["reason"], **note)
        rows += 1
    return rows


def filter_lines_task(job: dict) -> Counter:
    """Copy shard ``src`` to ``dst`` without the rows in ``drop``, kept lines byte for byte; byte
    counters from ``sizes`` (a .npy of every row's text size in UTF-8 bytes, saved when the shard
    was read)."""
    src, dst, reason = location(job["src"]), location(job["dst"]), job["reason"]
    sizes = load_array(job["sizes"])
    drop = np.zeros(len(sizes), dtype=bool)
    drop[np.asarray(job["drop"], dtype=np.int64)] = True
    whole = _whole_lines(src)  # a shard trident wrote, read at once: the usual case
    with ShardWriter(dst, job.get("level", LEVEL)) as writer, DropLog(log_path(dst)) as drops:
        if whole is not None and len(whole[1]) == len(sizes):
            rows = _filter_whole(src, writer, drops, *whole, drop, job)
        else:
            rows = len(whole[1]) if whole is not None else _filter_line_by_line(src, writer, drops, drop, job)
        if rows != len(sizes):
            raise CurateError(f"{src}: {rows} documents now, {len(sizes)} when it was read: the shard changed")
    dropped = int(drop.sum())
    kept_bytes = int(sizes[~drop].sum())
    # Unary + keeps the positive counts only, as the document-by-document copy reports them.
    return +Counter({"in": rows, "out": rows - dropped, f"dropped:{reason}": dropped,
                     "bytes_in": int(sizes.sum()), "bytes_out": kept_bytes})


def apply_drops_lines(stage: GlobalStage, inputs: list[Path], out_dir: Path, executor: Executor,
                      dropped: np.ndarray, reason: str, sizes_dir: Path) -> list[Path]:
    """Write the shards without the `dropped` document keys (or ``drop_records``: their drop log
    records then name the kept copies), copying kept lines as they are, and add their counters to
    ``stage.counters``; ``sizes_dir`` holds s<shard>.npy row sizes."""
    outputs = output_paths(inputs, out_dir)
    keys = dropped["key"] if dropped.dtype.names else dropped
    rows = drop_lists(keys, len(inputs))
    notes: list[dict] = [{} for _ in inputs]
    if dropped.dtype.names:
        shards = split_keys(keys)[0]
        for shard in sorted_distinct(shards).tolist():  # np.unique would import numpy.ma
            notes[shard] = row_notes(dropped[shards == shard])
    jobs = [{"src": str(i), "dst": str(o), "drop": r, "reason": reason, "stage": stage.name, "notes": n,
             "sizes": str(sizes_dir / f"s{k:06d}.npy"), "level": output_level(stage.work_outputs)}
            for k, (i, o, r, n) in enumerate(zip(inputs, outputs, rows, notes))]
    for counters in executor.map(filter_lines_task, jobs, desc=f"{stage.name}: write"):
        stage.counters.update(counters)
    return outputs
