"""Ids unique in a whole run: an id that two read tasks both handed out is qualified in the later one.

Each read task makes its documents' ids unique among themselves (read/doc_ids.py) without knowing
what the others read. Where a run has several read tasks (and a WARC or JSONL input: an HTML file's
id, its name, is unique in the run already), each also writes what it handed out
beside its shard (`SHARD.ids.npz`: a 64-bit hash of every id, and the ids with the file and place
of each document), and once every read task is done (`qualify_repeated_ids`, before any stage that
looks across documents) the driver finds the ids handed out by more than one task: the first task
in run order keeps the id, every later one renames its document to the first of its `alternates`
(`URI RECORD-ID`, `NAME:ID`, or the form naming its file and position) that no document of the run
holds, rewriting its shard and drop log. Nothing is read twice and nothing is rewritten in a run
without such repeats; the choice depends on the inputs alone, so a rerun gives the same ids. Two
different ids with one hash (odds about 1e-19 a pair) would only make one of them qualified.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trident.curate.droplog import DropLog, log_path, read_log
from trident.curate.read.doc_ids import alternates, claims_path, id_hash
from trident.curate.read.read_task import MARKER_SUFFIX
from trident.curate.read.shard_lines import shard_lines
from trident.curate.read.shards import LEVEL, PLAIN_SUFFIX, WORK_LEVEL, ShardWriter, input_format
from trident.curate.stage import Executor
from trident.text.atomic import write_json_atomic
from trident.text.storage import load_array, location, replace

DONE = "_ids.done.json"  # in the read phase's folder once every repeated id is qualified
IDS_QUALIFIED = "ids_qualified"  # the read counter of the documents renamed here


def ids_final(reads: list[dict]) -> bool:
    """Whether the read tasks' shards hold their final ids (one task, or the repeats qualified)."""
    return not any(task.get("claims") for task in reads) or _done_path(reads).exists()


def _done_path(reads: list[dict]) -> Path:
    return location(reads[0]["output"]).parent / DONE


def qualify_repeated_ids(reads: list[dict], executor: Executor) -> list[int]:
    """Qualify every id an earlier read task handed out too, in the later tasks' shards and drop logs;
    returns the documents renamed per task (the count is also added to each task's marker). Done once:
    a resumed run finds it done."""
    if not any(task.get("claims") for task in reads):
        return [0] * len(reads)
    done = _done_path(reads)
    if done.exists():
        return json.loads(done.read_text())["renamed"]
    hashes = []
    for task in reads:
        with load_array(claims_path(task["output"])) as stored:
            hashes.append(stored["hashes"])
    taken = np.unique(np.concatenate(hashes))  # every id of the run, hashed
    assigned: set[str] = set()
    jobs = []
    for task, rows in zip(reads, _later_repeats(hashes)):
        if rows.size:
            jobs.append({"output": task["output"], "level": _level(task),
                         "renames": _renames(task, rows, taken, assigned)})
    if jobs:
        executor.map(rewrite_ids_task, jobs, desc="ids")
    counts = {job["output"]: len(job["renames"]) for job in jobs}
    renamed = [counts.get(task["output"], 0) for task in reads]
    for task, count in zip(reads, renamed):
        if count:
            _add_to_marker(task["output"], count)
    write_json_atomic(done, {"renamed": renamed})
    return renamed


def _later_repeats(hashes: list[np.ndarray]) -> list[np.ndarray]:
    """Per task, the rows of its ids that an earlier task handed out too."""
    sizes = [len(h) for h in hashes]
    every = np.concatenate(hashes)
    owner = np.repeat(np.arange(len(hashes)), sizes)
    _, first, inverse = np.unique(every, return_index=True, return_inverse=True)  # first: its earliest row
    later = owner[first][inverse.reshape(-1)] < owner
    return [np.flatnonzero(part) for part in np.split(later, np.cumsum(sizes)[:-1])]


def _renames(task: dict, rows: np.ndarray, taken: np.ndarray, assigned: set[str]) -> dict[str, str]:
    """{old id: new id} of the documents at `rows` of one task's claims."""
    with load_array(claims_path(task["output"])) as stored:
        detail = json.loads(stored["detail"].tobytes().decode("utf-8", "surrogatepass"))
        places, files = stored["places"], stored["files"]
    names, ids, records = detail["names"], detail["ids"], detail["records"]
    renames = {}
    for row in rows.tolist():
        name = names[int(files[row])]
        choices = alternates(ids[row], input_format(Path(name)), name, int(places[row]), records.get(str(row), ""))
        new = next((c for c in choices[:-1] if not _held(taken, id_hash(c)) and c not in assigned), choices[-1])
        assigned.add(new)
        renames[ids[row]] = new
    return renames


def _held(taken: np.ndarray, key: int) -> bool:
    at = int(np.searchsorted(taken, np.uint64(key)))
    return at < len(taken) and int(taken[at]) == key


def _level(task: dict) -> int | None:
    """The zstd level the task's shard was written with (None: plain JSONL)."""
    if task["output"].endswith(PLAIN_SUFFIX):
        return None
    return WORK_LEVEL if task.get("work_only") else LEVEL


def _add_to_marker(output: str, count: int) -> None:
    marker = location(output + MARKER_SUFFIX)
    if marker.exists():
        result = json.loads(marker.read_text())
        result["read"][IDS_QUALIFIED] = count
        write_json_atomic(marker, result)


def rewrite_ids_task(job: dict) -> None:
    """One read task's shard and drop log with its documents renamed (module level: runs in workers);
    a shard renamed before stays as it is (no new id is an old one)."""
    renames, output = job["renames"], location(job["output"])
    staged = output.with_name(output.name + ".renaming")
    with ShardWriter(staged, job["level"]) as writer:
        for _, data in shard_lines(output):
            record = json.loads(data)
            new = renames.get(record["id"])
            if new is None:
                writer.write_line(data)
                continue
            record["id"] = new
            writer.write_line(json.dumps(record, ensure_ascii=False).encode("utf-8"))
    replace(staged, output)
    log = log_path(output)
    if log.exists():
        staged = log.with_name(log.name + ".renaming")
        with DropLog(staged) as drops:
            for record in read_log(log):
                doc_id, url, stage, reason = (record.pop(key) for key in ("id", "url", "stage", "reason"))
                drops.add(renames.get(doc_id, doc_id), url, stage, reason, **record)
        replace(staged, log)
