"""Curation pipelines: a YAML list of stages, run shard by shard on a local or Ray executor.

The config (a preset name such as curate-cc, a YAML file, a mapping or a bare list of stages) is
typed by trident.curate.run.config.CurationConfig, which lists its keys and their defaults:

    dataset: cc
    workers: 4
    stages:
      - {stage: extract}
      - {stage: langid, languages: [en], threshold: 0.5}
      - ...

Overrides are `key=value` (value parsed as YAML, by trident.config's one parser): top-level keys
(`workers=4`), or `stages.<name or index>.<param>=value` (`stages.min_length.min_tokens=64`).
Stage base classes live in trident.curate.stage, the registry of stage names in run/registry.py.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import time
from collections import Counter
from pathlib import Path

from trident.config import ConfigError, parse_overrides, read_yaml, resolve_path
from trident.config.typed import fill
from trident.curate.document import CurateError
from trident.curate.droplog import check_logged, publish_logs
from trident.curate.read.inputs import InputFiles, find_inputs, skipped_summary
from trident.curate.read.shards import PLAIN_SUFFIX, coalesce_inputs
from trident.curate.run.config import (NAME, CurateConfigError, CurationConfig, apply_stage_overrides,
                                       check_stage_entries)
from trident.curate.run.executors import make_executor
from trident.curate.run.phases import (import_modules, read_totals, run_global_phase, run_stream_phase, split_phases,
                                       stream_tasks, task_modules)
from trident.curate.run.registry import build_stage, stage_class
from trident.data.output_folder import OutputFolderError
from trident.data.run_folder import RunFolder
from trident.text.atomic import write_json_atomic
from trident.text.storage import copy_file, fingerprint, location, make_folder, remove_tree, replace

__all__ = ["CurationConfig", "load_pipeline_config", "run_pipeline", "check_accounting"]

REPORT_CHARTS = ("funnel.png", "quality_scores.png", "cluster_sizes.png")  # what write_report may draw
log = logging.getLogger(__name__)


def load_pipeline_config(config: str | Path | dict | list | CurationConfig,
                         overrides: list[str] | tuple = ()) -> CurationConfig:
    """A checked pipeline config from a YAML path, a preset name, a mapping or a list of stages, with
    `key=value` overrides applied. Unknown keys/stages/params and wrong types raise CurateConfigError
    (a CurateError and a trident.config.ConfigError) naming the key, and the file of a key from one."""
    try:
        file = resolve_path(config) if isinstance(config, (str, Path)) else None
        tree = read_yaml(file, allow_list=True) if file else config
        cfg = _from_tree(tree, f"{file}: " if file else "")
        changes = parse_overrides(list(overrides))
        selected = changes.pop("stages") if isinstance(changes.get("stages"), dict) else {}
        fill(cfg, changes, name=NAME)
        check_stage_entries(cfg)
        apply_stage_overrides(cfg.stages, selected)
        import_modules(cfg.modules)
        for spec in cfg.stages:
            if spec.get("enabled", True):
                build_stage(spec["stage"], {k: v for k, v in spec.items() if k not in ("stage", "enabled")})
        return cfg
    except CurateConfigError:
        raise
    except (ConfigError, CurateError) as err:  # the typed filling, and stage and module errors
        raise CurateConfigError(str(err)) from err


def _from_tree(tree: dict | list | CurationConfig, where: str) -> CurationConfig:
    """The config a file (named by `where`), a mapping or a list of stages gives before overrides."""
    if isinstance(tree, CurationConfig):
        tree = dataclasses.asdict(tree)
    tree = {"stages": tree} if isinstance(tree, list) else copy.deepcopy(tree)
    if not isinstance(tree, dict):
        raise CurateConfigError(f"{NAME} must be a list of stages or a mapping with a 'stages' list")
    try:
        cfg = fill(CurationConfig(), tree, name=NAME)
        check_stage_entries(cfg)
    except ConfigError as err:
        raise CurateConfigError(f"{where}{err}") from None
    return cfg


def _resolve_inputs(config: CurationConfig, extra: list[Path] | tuple) -> InputFiles:
    """Files, folders and glob patterns of the config and the command line (curate.read.inputs)."""
    entries = [(entry, None) if isinstance(entry, str) else (entry.path, entry.dataset)
               for entry in list(config.inputs) + [str(p) for p in extra]]
    found = find_inputs([(path, dataset or config.dataset) for path, dataset in entries])
    if not found.files:
        skipped = f" (skipped: {skipped_summary(found.skipped)})" if found.skipped else ""
        raise CurateError(f"no inputs: give --input PATH (or 'inputs:' in the pipeline config){skipped}")
    return found


def check_accounting(stages: list[dict]) -> list[str]:
    """Problems with the funnel: each stage must have in == out + sum(dropped:*), and each stage
    must receive exactly what the previous one let out. Empty list: every document is accounted for."""
    problems = []
    previous_out = None
    for entry in stages:
        counters = entry["counters"]
        dropped = sum(v for k, v in counters.items() if k.startswith("dropped:"))
        if counters.get("in", 0) != counters.get("out", 0) + dropped:
            problems.append(f"stage {entry['name']}: in={counters.get('in', 0)} != "
                            f"out={counters.get('out', 0)} + dropped={dropped}")
        if previous_out is not None and counters.get("in", 0) != previous_out:
            problems.append(f"stage {entry['name']}: in={counters.get('in', 0)} but the previous stage "
                            f"let out {previous_out}")
        previous_out = counters.get("out", 0)
    return problems


def _read_groups(config: CurationConfig, inputs: list[tuple[Path, str]]) -> tuple[list[list], dict]:
    """(the inputs coalesced into the first phase's shards, the run's fingerprint): a rerun with the
    same fingerprint resumes; size and mtime in it, so an input edited in place reuses no marker."""
    marks = [fingerprint(p) for p, _ in inputs]
    groups = coalesce_inputs(inputs, [mark["size"] for mark in marks], config.shard_bytes)
    return groups, {"stages": config.stages,
                    "inputs": [[str(p), d, *mark.values()] for (p, d), mark in zip(inputs, marks)],
                    "groups": [len(group) for group in groups],  # shard N must hold the same files to resume
                    "strict": config.strict, "max_doc_bytes": config.max_doc_bytes}


def _prepare_work_dir(work: Path, fingerprint: dict) -> None:
    """Reuse OUT/work for a resumed run of the same pipeline; start afresh for any other, deleting
    the old one only when its stamp shows trident curate wrote it."""
    stamp = work / "pipeline.json"
    if work.exists() and not stamp.exists():
        raise OutputFolderError(f"{work}: exists but was not written by trident curate (no pipeline.json); "
                                f"move it away, it is never deleted")
    if work.exists() and json.loads(stamp.read_text()) != fingerprint:
        remove_tree(work)
    make_folder(work)
    write_json_atomic(stamp, fingerprint)


def _claim(folder: RunFolder, work: Path, fingerprint: dict, overwrite: bool) -> None:
    """Check that this run may write into OUT (empty; its own interrupted run: OUT/work holds the same
    pipeline; or overwrite) and remove the outputs an earlier curate run listed in OUT's marker."""
    stamp = work / "pipeline.json"
    resumable = lambda marker: stamp.is_file() and json.loads(stamp.read_text()) == fingerprint
    marker = folder.claim(overwrite, same_run=resumable,
                          resume_hint=" and holds no interrupted run of the same pipeline and inputs")
    folder.remove_own(marker, list((marker or {}).get("outputs", [])))
    folder.stamp({"outputs": []})


def _publish(shards: list[Path], out_dir: Path, keep_work: bool) -> list[Path]:
    final = []
    for index, shard in enumerate(shards):
        target = out_dir / f"shard-{index:05d}.jsonl.zst"
        if target.exists():  # every earlier output of trident's was removed by _claim
            raise OutputFolderError(f"{target}: exists and was not written by this trident curate run; "
                                    f"move it away, it is never replaced")
        copy_file(shard, target) if keep_work else replace(shard, target)
        final.append(target)
    return final


def run_pipeline(config: str | Path | dict | list | CurationConfig, inputs: list[Path] | tuple = (),
                 out_dir: Path | str | RunFolder = "curated",
                 executor: str | None = None, workers: int | None = None, overrides: list[str] | tuple = (),
                 overwrite: bool = False) -> dict:
    """Run a curation pipeline over `inputs` (plus the config's own inputs) into `out_dir`:
    OUT/shard-*.jsonl.zst, OUT/stats.json, OUT/report.md (+ PNG charts). Returns the stats dict.

    `executor`/`workers` override the config's. Raises CurateError on bad config, on a bad record in
    strict mode, and (after writing stats) when the accounting check fails; OutputFolderError when
    OUT is not empty and is neither this pipeline's interrupted run nor `overwrite`n. Only what
    trident curate wrote (listed in OUT's marker, or stamped work/) is ever deleted.
    """
    cfg = load_pipeline_config(config, overrides)
    given = {"executor": executor, "workers": workers}
    try:
        fill(cfg, {key: value for key, value in given.items() if value is not None}, name=NAME)
    except ConfigError as err:
        raise CurateConfigError(str(err)) from None
    found = _resolve_inputs(cfg, inputs)
    folder = out_dir if isinstance(out_dir, RunFolder) else RunFolder(out_dir, "curate")
    specs = [spec for spec in cfg.stages if spec.get("enabled", True)]
    # local helpers start before the lock's thread does: a process running only its main thread forks
    # them (~0.05 s, trident already imported) where it would spawn fresh interpreters (~0.5 s each)
    pool = make_executor("local", cfg.workers, progress=cfg.progress) if cfg.executor == "local" else None
    try:
        if pool is not None:
            pool.warm_up(task_modules(specs, cfg.modules))
        folder.hold()  # a second curate into OUT meanwhile exits 2
        try:
            if folder.takeover_message():
                log.warning("curate: %s", folder.takeover_message())
            stats = _run_claimed(cfg, specs, found, folder, overwrite, pool)
        finally:
            folder.release()
    finally:
        if pool is not None:
            pool.close()
    folder.lock.check()  # a lock lost during the run: its outputs may be mixed with another run's
    return stats


def _run_claimed(cfg: CurationConfig, specs: list[dict], found: InputFiles, folder: RunFolder, overwrite: bool,
                 pool) -> dict:
    """run_pipeline's work once OUT's lock is held: `specs` (the enabled stages) run on `pool` (the
    local executor), or on Ray, started here."""
    files = found.files
    groups, fingerprint = _read_groups(cfg, files)
    fingerprint["names"] = [found.names[str(path)] for path, _ in files]  # documents' ids start from them
    out_dir = folder.path
    work = out_dir / "work"
    _claim(folder, work, fingerprint, overwrite)
    _prepare_work_dir(work, fingerprint)
    options = {"strict": cfg.strict, "max_doc_bytes": cfg.max_doc_bytes, "modules": cfg.modules,
               "names": found.names}
    start = time.time()
    if pool is None:  # Ray, started once OUT is held (the local pool was started and warmed before)
        pool = make_executor(cfg.executor, cfg.workers, cfg.ray_address, progress=cfg.progress)
        pool.warm_up(task_modules(specs, cfg.modules))
    try:
        current, stage_stats, errors, problems = _run_phases(specs, groups, work, pool, options)
    finally:
        pool.close()  # before the outputs are published: the helpers' work is done
    elapsed = time.time() - start
    final = _publish(current, out_dir, cfg.keep_work)
    drops = publish_logs(work, out_dir / "drops", cfg.keep_work)
    if not cfg.keep_work:
        remove_tree(work)
    problems += check_accounting(stage_stats) + check_logged(stage_stats, drops["records"])
    stats = {
        "inputs": [{"path": str(p), "dataset": d, "name": found.names[str(p)]} for p, d in files],
        "skipped_files": dict(sorted(found.skipped.items())),
        "executor": cfg.executor, "workers": pool.workers, "elapsed_s": round(elapsed, 3),
        "records_per_s": round(stage_stats[0]["counters"].get("in", 0) / max(elapsed, 1e-9), 2),
        "stages": [{**s, "counters": dict(sorted(s["counters"].items()))} for s in stage_stats],
        "output": {"shards": [str(p) for p in final], "documents": stage_stats[-1]["counters"].get("out", 0)},
        "accounting": {"ok": not problems, "problems": problems},
        "drops": drops,
        "errors": errors,
        "config": cfg.settings(),
    }
    write_json_atomic(out_dir / "stats.json", stats)
    _write_report_safely(stats, out_dir)
    charts = [name for name in REPORT_CHARTS if (out_dir / name).exists()]
    report = ["report.md"] if (out_dir / "report.md").exists() else []
    outputs = [p.name for p in final] + ["stats.json", "drops"] + report + charts
    folder.stamp({"outputs": outputs})
    if problems:
        raise CurateError("accounting check failed (documents vanished uncounted): " + "; ".join(problems))
    return stats


def _write_report_safely(stats: dict, out_dir: Path) -> None:
    """Write report.md; a report failure is logged as one line and never fails the finished run."""
    from trident.curate.run import report

    try:
        report.write_report(stats, out_dir)
    except Exception as err:  # noqa: BLE001 - the outputs and stats.json are already complete
        detail = " ".join(str(err).split())
        log.warning("curate: report.md not written (%s: %s); shards and stats.json are complete",
                    type(err).__name__, detail)


def _run_phases(specs: list[dict], files: list[list[tuple[Path, str]]], work: Path, pool, options: dict):
    """Run every phase in order over the inputs (`files`: groups of them, one shard each); returns
    (final shards, per-stage stats, bad records, problems)."""
    stage_stats: list[dict] = []
    errors: list[dict] = []
    problems: list[str] = []
    current: list = files
    phases = split_phases(specs)
    reads = None
    for number, (kind, phase_specs) in enumerate(phases):
        phase_dir = work / f"phase-{number:02d}"
        if number == 0 and _stage_reads_raw(phases, pool):  # phase 1 runs these reads in its first pass
            reads = stream_tasks([], files, phase_dir, options, read_raw=True, suffix=PLAIN_SUFFIX)
            current = [location(task["output"]) for task in reads]
        elif kind == "global":
            current, counters, seconds = run_global_phase(phase_specs[0], current, phase_dir, pool, reads,
                                                          work_only=number < len(phases) - 1)
            if reads:
                totals = read_totals(reads)
                _add_read_entry(stage_stats, errors, totals)
                _check_written(problems, "read", totals["written"], totals["read"])
                reads = None  # only the stage right after the read phase runs it
            stage_stats.append(_entry(phase_specs[0], "global", counters, seconds))
        else:
            read_raw = number == 0
            shard_inputs = current if read_raw else [(p, None) for p in current]
            names = "+".join(s["stage"] for s in phase_specs) or "read"
            current, totals = run_stream_phase(phase_specs, shard_inputs, phase_dir, pool, options, read_raw,
                                               desc=names, work_only=number < len(phases) - 1)
            if read_raw:
                _add_read_entry(stage_stats, errors, totals)
            for spec, counters, seconds in zip(phase_specs, totals["stages"], totals["seconds"][1:]):
                stage_stats.append(_entry(spec, "streaming", counters, seconds))
            _check_written(problems, f"phase {names}", totals["written"], stage_stats[-1]["counters"])
    return current, stage_stats, errors, problems


def _check_written(problems: list[str], what: str, written: int, counters: dict) -> None:
    """A problem when a phase wrote another number of documents than its last counters let out."""
    if written != counters.get("out", 0):
        problems.append(f"{what}: wrote {written} documents but counted {counters.get('out', 0)} out")


def _stage_reads_raw(phases: list[tuple[str, list[dict]]], pool) -> bool:
    """Whether the read phase (no streaming stages) can run inside the global stage that follows it:
    one that declares ``reads_raw``, on an executor that runs its steps here (not Ray's distributed dedup)."""
    return (not phases[0][1] and len(phases) > 1 and phases[1][0] == "global"
            and stage_class(phases[1][1][0]["stage"]).reads_raw and not getattr(pool, "dedup_on_workers", False))


def _add_read_entry(stage_stats: list[dict], errors: list[dict], totals: dict) -> None:
    """The read phase's stats entry (its counters and own seconds) and its bad-record examples."""
    stage_stats.append({"name": "read", "kind": "read", "params": {}, "counters": totals["read"],
                        "seconds": round(totals["seconds"][0], 3)})
    errors.extend(totals["errors"])


def _entry(spec: dict, kind: str, counters: Counter, seconds: float) -> dict:
    params = {k: v for k, v in spec.items() if k not in ("stage", "enabled")}
    return {"name": spec["stage"], "kind": kind, "params": params, "counters": Counter(counters),
            "seconds": round(seconds, 3)}
