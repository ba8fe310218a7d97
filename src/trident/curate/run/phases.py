"""Phases of a pipeline run: fused streaming stages over each shard, and global stages between.

Every finished unit of work leaves a completion marker (JSON with its counters) next to its
output; a rerun after a crash finds the markers and redoes only what has none.
"""
from __future__ import annotations

import importlib
import json
import os
import time
from collections import Counter
from pathlib import Path

from trident.curate.document import CurateError
from trident.curate.read.read_task import (MARKER_SUFFIX, fresh_drop_log, raw_sources, read_before, save_task_claims,
                                           timed)
from trident.curate.read.record_log import RecordLog
from trident.curate.read.run_ids import IDS_QUALIFIED, ids_final, qualify_repeated_ids
from trident.curate.read.shards import (LEVEL, SHARD_SUFFIX, WORK_LEVEL, input_format, read_documents, read_shard,
                                        record_lines, write_lines, write_shard)
from trident.curate.run.registry import build_stage, stage_class
from trident.curate.stage import Executor, GlobalStage, StreamingStage
from trident.text.atomic import write_json_atomic
from trident.text.storage import is_remote, location, make_folder, remove_tree


def is_global(spec: dict) -> bool:
    return issubclass(stage_class(spec["stage"]), GlobalStage)


def split_phases(specs: list[dict]) -> list[tuple[str, list[dict]]]:
    """Group stage specs into phases: ("stream", [consecutive streaming specs]) and ("global", [spec]).
    The first phase is always a streaming one (possibly with no stages): it reads the raw inputs."""
    phases: list[tuple[str, list[dict]]] = [("stream", [])]
    for spec in specs:
        if is_global(spec):
            phases.append(("global", [spec]))
        elif phases[-1][0] == "stream":
            phases[-1][1].append(spec)
        else:
            phases.append(("stream", [spec]))
    return phases


def _params(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in ("stage", "enabled")}


def import_modules(modules: list[str]) -> None:
    """Import the config's `modules` (their @register_stage classes become usable stage names)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise CurateError(f"pipeline config: modules: cannot import {module!r} ({err})") from err


def task_modules(specs: list[dict], modules: list[str]) -> list[str]:
    """Every module a worker process needs for the tasks of these stages (for executor.warm_up)."""
    needed = [__name__, *modules]
    for spec in specs:
        cls = stage_class(spec["stage"])
        needed += [cls.__module__, *cls.worker_modules]
    return list(dict.fromkeys(needed))


def stream_shard(task: dict) -> dict:
    """One shard through a chain of streaming stages (module-level: it runs in worker processes).

    Returns {"read": reader counters or None, "stages": [counters per stage], "errors": [...],
    "written": n, "seconds": [reader, stage 1, ...] (each stage's own time)}; the same dict is
    saved as the shard's completion marker.
    """
    marker = location(task["output"] + MARKER_SUFFIX)
    if read_before(task):
        return json.loads(marker.read_text())
    import_modules(task["modules"])  # worker processes start without the driver's custom stages
    stages = [build_stage(spec["stage"], _params(spec)) for spec in task["specs"]]
    drops = fresh_drop_log(task["output"])
    for stage in stages:
        stage.setup()
        stage.drops = drops
    log = RecordLog(strict=task["strict"], drops=drops)
    spent = [0.0] * (len(stages) + 1)
    level = WORK_LEVEL if task.get("work_only") else LEVEL
    raw, limit = (raw_sources(task) if task["read_raw"] else []), task["max_doc_bytes"]
    if raw and not stages and all(input_format(path) == "jsonl" for path, _, _ in raw):
        lines = (line for path, dataset, naming in raw
                 for line in record_lines(path, log, dataset, limit, naming.name, naming.ids))
        written = write_lines(location(task["output"]), timed(lines, spent, 0), level)  # no Documents needed
    else:
        if raw:
            docs = (doc for path, dataset, naming in raw
                    for doc in read_documents(path, log, dataset, limit, naming.name, naming.ids))
        else:
            docs = read_shard(location(task["input"]))
        docs = timed(docs, spent, 0)
        for slot, stage in enumerate(stages, start=1):
            assert isinstance(stage, StreamingStage)
            docs = timed(stage.process(docs), spent, slot)
        written = write_shard(location(task["output"]), docs, level)
    drops.close()  # complete before the marker: a resumed run keeps it
    save_task_claims(task, raw)
    own = [spent[0]] + [spent[i] - spent[i - 1] for i in range(1, len(spent))]
    result = {
        "read": dict(log.counters) if task["read_raw"] else None,
        "stages": [dict(stage.counters) for stage in stages],
        "errors": log.errors,
        "written": written,
        "seconds": [round(x, 6) for x in own],
    }
    write_json_atomic(marker, result)
    return result


def stream_tasks(specs: list[dict], inputs: list[tuple[Path, str | None]], phase_dir: Path, options: dict,
                 read_raw: bool, work_only: bool = False, suffix: str = SHARD_SUFFIX) -> list[dict]:
    """``stream_shard``'s task for every input shard of a streaming phase (outputs under ``phase_dir``,
    named shard-<index><suffix>). An input is (path, dataset), or a list of them: small raw files
    read one after the other into one shard (curate.read.shards.coalesce_inputs). Where there are
    several read tasks, each notes the ids it hands out (`claims`, read/run_ids.py)."""
    make_folder(phase_dir)
    groups = [entry if isinstance(entry, list) else [entry] for entry in inputs]
    names = options.get("names") or {}  # each input file's name in the run (curate.read.inputs)
    # HTML files' ids are their names, unique in the run already: only other sources can repeat one
    claims = read_raw and len(groups) > 1 and any(input_format(Path(path)) != "html" for group in groups
                                                  for path, _ in group)
    return [{"specs": specs, "input": str(group[0][0]), "output": str(phase_dir / f"shard-{index:05d}{suffix}"),
             "read_raw": read_raw, "dataset": group[0][1], "strict": options["strict"],
             "group": [(str(path), dataset) for path, dataset in group] if len(group) > 1 else None,
             "names": [names.get(str(path)) for path, _ in group] if read_raw else None,
             "max_doc_bytes": options["max_doc_bytes"], "modules": options.get("modules", []),
             "work_only": work_only, "claims": claims} for index, group in enumerate(groups)]


def largest_first(tasks: list[dict]) -> list[int]:
    """The tasks' indexes, those with the most input bytes first (local files; a remote input counts
    0 and keeps its place): workers take tasks in this order, and a large file handed out last kept
    one worker busy alone at the end (sqlite's requirements.html, 1.85 MB: 3 of a run's 7 s)."""
    def input_bytes(task: dict) -> int:
        paths = [path for path, _ in task["group"]] if task["group"] else [task["input"]]
        return sum(os.path.getsize(path) for path in paths if not is_remote(path) and os.path.isfile(path))

    return sorted(range(len(tasks)), key=lambda index: -input_bytes(tasks[index]))


def stream_totals(results: list[dict], stages: int) -> dict:
    """The sum of ``stream_shard`` results (of a phase of ``stages`` streaming stages)."""
    totals = {"read": Counter(), "stages": [Counter() for _ in range(stages)], "errors": [], "written": 0,
              "seconds": [0.0] * (stages + 1)}
    for result in results:
        totals["seconds"] = [a + b for a, b in zip(totals["seconds"], result["seconds"])]
        if result["read"] is not None:
            totals["read"].update(result["read"])
        for counter, counts in zip(totals["stages"], result["stages"]):
            counter.update(counts)
        totals["errors"].extend(result["errors"])
        totals["written"] += result["written"]
    return totals


def run_stream_phase(specs: list[dict], inputs: list[tuple[Path, str | None]], phase_dir: Path,
                     executor: Executor, options: dict, read_raw: bool, desc: str,
                     work_only: bool = False) -> tuple[list[Path], dict]:
    """Run fused streaming stages over every input shard (one task each); returns (outputs, totals).
    ``work_only``: a later phase reads the outputs and they are never published (faster zstd level)."""
    tasks = stream_tasks(specs, inputs, phase_dir, options, read_raw, work_only)
    order = largest_first(tasks)
    results: list = [None] * len(tasks)
    for index, result in zip(order, executor.map(stream_shard, [tasks[i] for i in order], desc=desc)):
        results[index] = result
    if read_raw:  # every read task is done: an id two of them handed out is qualified in the later one
        for result, renamed in zip(results, qualify_repeated_ids(tasks, executor)):
            if renamed:
                result["read"][IDS_QUALIFIED] = renamed
    return [location(t["output"]) for t in tasks], stream_totals(results, len(specs))


def read_totals(tasks: list[dict]) -> dict:
    """``stream_totals`` of finished read tasks (by ``read_raw_documents`` or ``stream_shard``), from their markers."""
    return stream_totals([json.loads(location(t["output"] + MARKER_SUFFIX).read_text()) for t in tasks], 0)


def run_global_phase(spec: dict, inputs: list[Path], phase_dir: Path, executor: Executor,
                     reads: list[dict] | None = None, work_only: bool = False) -> tuple[list[Path], Counter, float]:
    """Run one global stage (or reuse its finished result); returns (output shards, counters, wall seconds).
    ``work_only``: a later phase reads the outputs and they are never published (faster zstd level).
    ``reads``: the read tasks whose outputs are ``inputs``, for a stage that reads the raw inputs itself.
    Such a stage sees each read task's own ids: where the read tasks then turn out to have handed out
    one id twice (read/run_ids.py), it is run again on the read shards with the run's ids."""
    marker = phase_dir / ("_phase" + MARKER_SUFFIX)
    if marker.exists():
        done = json.loads(marker.read_text())
        outputs = [location(p) for p in done["outputs"]]
        if all(p.exists() for p in outputs):
            return outputs, Counter(done["counters"]), done["seconds"]
    start = time.perf_counter()
    final = reads is None or ids_final(reads)  # the read shards, if read before, hold the run's ids
    outputs, stage = _run_global_stage(spec, inputs, phase_dir, executor, reads, work_only)
    if not final and any(qualify_repeated_ids(reads, executor)):
        outputs, stage = _run_global_stage(spec, inputs, phase_dir, executor, None, work_only)
    seconds = round(time.perf_counter() - start, 6)
    write_json_atomic(marker, {"outputs": [str(p) for p in outputs], "counters": dict(stage.counters),
                               "seconds": seconds})
    return outputs, Counter(stage.counters), seconds


def _run_global_stage(spec: dict, inputs: list[Path], phase_dir: Path, executor: Executor,
                      reads: list[dict] | None, work_only: bool) -> tuple[list[Path], GlobalStage]:
    if phase_dir.exists():
        remove_tree(phase_dir)  # a half-finished global phase is redone from scratch
    make_folder(phase_dir)
    stage = build_stage(spec["stage"], _params(spec))
    assert isinstance(stage, GlobalStage)
    stage.raw_reads, stage.work_outputs = reads, work_only
    stage.setup()
    return [location(p) for p in stage.run(list(inputs), phase_dir, executor)], stage
