"""What exact and fuzzy dedup share: keep-priority, document keys, hash-partition files, and
writing each shard again without its dropped rows.

Which document of a duplicate group survives (``best_first``), in order:
  1. rank of ``meta[priority_field]`` (default "dataset") in the ``priority`` list; values not in
     the list rank after all listed ones;
  2. higher ``meta["quality_score"]`` (documents without one after those with one);
  3. longer text (characters);
  4. smaller document id, then input order, so the choice is deterministic.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import xxhash

from trident.curate.document import CurateError, Document
from trident.curate.droplog import DropLog, log_path
from trident.curate.shards import ShardWriter, read_shard, write_shard
from trident.curate.stage import Executor, GlobalStage, output_paths
from trident.text.compressed import open_binary
from trident.text.compressed import open_binary
from trident.text.jsonl import UnreadableFile, iter_raw_lines
from trident.text.storage import load_array, location, make_folder, save_array

_ROW_BITS = np.uint64(32)
_ROW_MASK = np.uint64(0xFFFFFFFF)
SCOPES = ("global", "dataset")


# ---- keep-priority ---------------------------------------------------------------------------

def priority_fields(doc: Document, priority: list[str], priority_field: str) -> tuple[int, float, int, str]:
    """(rank, quality or NaN, length, id) of a document: the inputs of ``best_first``."""
    value = doc.meta.get(priority_field)
    rank = priority.index(value) if value in priority else len(priority)
    quality = doc.meta.get("quality_score")
    quality = float(quality) if isinstance(quality, (int, float)) and not isinstance(quality, bool) else math.nan
    return rank, quality, len(doc.text), doc.id


def priority_array(rows: list[tuple[int, float, int, str]], keys: np.ndarray) -> np.ndarray:
    """Structured array (rank, quality, length, id, key) from ``priority_fields`` rows and doc keys."""
    rank, quality, length, ids = zip(*rows) if rows else ((), (), (), ())
    return priority_columns(rank, quality, length, np.array(ids, dtype=str), keys)


def priority_columns(rank, quality, length, ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The same structured array from its columns (as a shard table stores them: no Python loop)."""
    dtype = [("rank", "i4"), ("quality", "f8"), ("length", "i8"), ("id", f"U{max(ids.dtype.itemsize // 4, 1)}"),
             ("key", "u8")]
    out = np.empty(len(ids), dtype=dtype)
    out["rank"], out["quality"], out["length"], out["id"], out["key"] = rank, quality, length, ids, keys
    return out


def stored_priorities(table, member: np.ndarray) -> np.ndarray:
    """Priority records of the rows ``member`` selects from a saved shard table (keys, rank, quality, length, id)."""
    return priority_columns(table["rank"][member], table["quality"][member], table["length"][member],
                            np.asarray(table["id"][member], dtype=str), table["keys"][member])


def best_first(records: np.ndarray) -> np.ndarray:
    """Indices of ``records`` (a priority array) ordered from the document to keep to the last."""
    quality_key = np.where(np.isnan(records["quality"]), np.inf, -records["quality"])
    return np.lexsort((records["key"], records["id"], -records["length"], quality_key, records["rank"]))


def concat_structured(arrays: list[np.ndarray]) -> np.ndarray:
    """Concatenate structured arrays whose string fields may differ in width."""
    names = arrays[0].dtype.names
    dtype = []
    for name in names:
        kinds = [a.dtype[name] for a in arrays]
        dtype.append((name, max(kinds, key=lambda d: d.itemsize) if kinds[0].kind == "U" else kinds[0]))
    return np.concatenate([a.astype(dtype) for a in arrays])


def doc_key(shard: int, row: int) -> int:
    """One uint64 naming a document: shard index in the high 32 bits, row in the low 32."""
    return (shard << 32) | row


def doc_keys(shard: int, rows) -> np.ndarray:
    """``doc_key`` of many rows of one shard at once (uint64)."""
    return (np.uint64(shard) << _ROW_BITS) | np.asarray(rows, dtype=np.uint64)


def split_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shard indices, rows) of an array of ``doc_key`` values."""
    keys = np.asarray(keys, dtype=np.uint64)
    return (keys >> _ROW_BITS).astype(np.int64), (keys & _ROW_MASK).astype(np.int64)


def dataset_salt(doc: Document, scope: str) -> int:
    """0 in global scope; a hash of meta["dataset"] in dataset scope (keeps datasets apart)."""
    if scope == "global":
        return 0
    return xxhash.xxh3_64_intdigest(str(doc.meta.get("dataset", "")).encode("utf-8"))


# ---- shared map/reduce plumbing --------------------------------------------------------------

def validate_common(priority: Any, priority_field: Any, scope: Any, partitions: Any) -> None:
    """Raise ValueError naming the parameter when a shared dedup parameter is malformed."""
    if not isinstance(priority, list) or not all(isinstance(p, str) for p in priority):
        raise ValueError(f"priority must be a list of strings, got {priority!r}")
    if not isinstance(priority_field, str) or not priority_field:
        raise ValueError(f"priority_field must be a meta key name, got {priority_field!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    if not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions must be an integer >= 1, got {partitions!r}")


def save_partitioned(records: np.ndarray, part_of: np.ndarray, folder: Path, prefix: str, name: str) -> None:
    """Write ``records`` to folder/<prefix><part>/<name>.npy, one file per partition present, each
    partition's rows in their order in ``records``."""
    part_of = np.asarray(part_of)
    if len(part_of) == 0:
        return
    if part_of.min() >= 0 and part_of.max() < 1 << 16:
        part_of = part_of.astype(np.uint16)  # a stable sort of 16-bit keys is numpy's radix sort
    # One sort and one gather (np.take: several times faster than indexing with the array), then a
    # slice per partition: a boolean mask per partition read every record once per partition.
    order = np.argsort(part_of, kind="stable")
    ordered, parts = np.take(records, order, axis=0), part_of[order]
    cuts = np.flatnonzero(parts[1:] != parts[:-1]) + 1
    for start, stop in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(parts)].tolist()):
        target = folder / f"{prefix}{int(parts[start]):06d}"
        make_folder(target)
        save_array(target / f"{name}.npy", ordered[start:stop])


def load_partition(folder: Path) -> np.ndarray | None:
    """Every .npy file of one partition folder concatenated (in name order), or None when it holds none."""
    files = sorted(folder.glob("*.npy"))
    if not files:
        return None
    arrays = [load_array(f) for f in files]
    return concat_structured(arrays) if arrays[0].dtype.names else np.concatenate(arrays)


def copy_without(src: str, dst: str, drop: set[int], reason: str, stage: str) -> Counter:
    """Copy shard ``src`` to ``dst`` without the rows in ``drop`` (counted as ``dropped:<reason>``
    and written to ``dst``'s drop log)."""
    counters: Counter = Counter()

    def kept(drops: DropLog):
        for row, doc in enumerate(read_shard(location(src))):
            counters["in"] += 1
            counters["bytes_in"] += doc.nbytes
            if row in drop:
                counters[f"dropped:{reason}"] += 1
                drops.add(doc.id, str(doc.meta.get("url", "")), stage, reason)
                continue
            counters["out"] += 1
            counters["bytes_out"] += doc.nbytes
            yield doc

    with DropLog(log_path(dst)) as drops:
        write_shard(location(dst), kept(drops))
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
    under WORK/drops/s<shard>/, written worker to worker by ``job["stage"]``'s last reduce step)."""
    dropped = load_partition(location(job["work"]) / "drops" / f"s{job['shard']:06d}")
    rows = set() if dropped is None else set(split_keys(dropped)[1].tolist())
    return copy_without(job["src"], job["dst"], rows, "duplicate", job["stage"])


# ---- raw lines: read a shard's documents without decoding them, copy them without re-encoding ---

def shard_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-blank line of a shard: row i is ``read_shard``'s i-th document."""
    try:
        for number, data, _ in iter_raw_lines(path):
            # A record starts with "{"; anything else is blank exactly when read_shard skips it.
            if data[:1] == b"{" or data.decode("utf-8", errors="replace").strip():
                yield number, data
    except UnreadableFile as err:
        raise CurateError(f"{path}: {err.detail} (from line {err.line} on)") from err


def parse_document(path: Path, number: int, data: bytes) -> Document:
    """The Document of one line from ``shard_lines`` (the id ``read_shard`` gives it); CurateError
    naming the file and line for a record read_shard would refuse."""
    try:
        doc = Document.from_json(json.loads(data.decode("utf-8")), default_id=f"{path.name}:{number}")
        doc.text.encode("utf-8")  # a lone surrogate could not be written back out
    except ValueError as err:  # JSON, UTF-8 and UnicodeEncodeError errors are ValueErrors
        raise CurateError(f"{path}: line {number}: {err}") from err
    return doc


def shard_documents(path: Path) -> Iterator[Document]:
    """``read_shard(path)``'s documents, read with less overhead per line."""
    path = location(path)
    for number, data in shard_lines(path):
        yield parse_document(path, number, data)


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
        drops.add(doc.id, str(doc.meta.get("url", "")), job["stage"], job["reason"])
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
            drops.add(doc.id, str(doc.meta.get("url", "")), job["stage"], job["reason"])
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
    with ShardWriter(dst) as writer, DropLog(log_path(dst)) as drops:
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
    """Write the shards without the `dropped` document keys, copying kept lines as they are, and add
    their counters to ``stage.counters``; ``sizes_dir`` holds s<shard>.npy row sizes."""
    outputs = output_paths(inputs, out_dir)
    rows = drop_lists(dropped, len(inputs))
    jobs = [{"src": str(i), "dst": str(o), "drop": r, "reason": reason, "stage": stage.name,
             "sizes": str(sizes_dir / f"s{k:06d}.npy")} for k, (i, o, r) in enumerate(zip(inputs, outputs, rows))]
    for counters in executor.map(filter_lines_task, jobs, desc=f"{stage.name}: write"):
        stage.counters.update(counters)
    return outputs
