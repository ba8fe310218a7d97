"""Straggler attribution: which rank's compute is slower than its peers', and how many seconds of
every step that costs the whole job.

Every `diagnostics.straggler_interval` steps each rank reports its sections (forward, backward,
pipeline waits, DP reduction, optimizer; with one pipeline stage forward and backward are one
`compute` section) and, with pp > 1, its measured timeline boxes. Peers are the ranks holding the same
shard of the same stage in the other DP replicas (the same work). A rank whose compute exceeds its
peers' median by more than `straggler_pct` is slower at this check; of a TP group (whose members wait
for each other inside every layer, so all look slow) the slowest is kept. Whether it is named is
straggler_watch.py's rule (slow consistently, beyond the noise, at a material cost). The seconds it
costs are estimated by replaying the measured step
through the pipeline simulator (each DP replica's pipeline from its own boxes; the step ends with the
slowest replica) with that rank's boxes replaced by its peers' median, and taking the difference.
"""
from __future__ import annotations

import statistics

import torch.distributed as dist

from trident.config.pipeline_schedules import DEFAULT_SCHEDULE
from trident.parallel.pipeline.overlap import schedule_for
from trident.parallel.pipeline.simulate import simulate

PIPELINE_SECTIONS = ("forward", "backward", "pipeline_wait")


def rank_report(mesh, phases: dict[str, float], boxes: list | None) -> dict:
    """This rank's sections for one step (seconds), plus its compute boxes with pp > 1."""
    report = {"rank": mesh.rank, "dp_rank": mesh.dp_rank, "pp_rank": mesh.pp_rank, "tp_rank": mesh.tp_rank,
              "dp_reduction": phases.get("finalize", 0.0), "optimizer": phases.get("step", 0.0)}
    if boxes is None:
        return report | {"compute": phases.get("forward_backward", 0.0)}
    took = lambda *kinds: sum(b.end - b.start for b in boxes if b.kind in kinds)  # noqa: E731
    return report | {"forward": took("forward"), "backward": took("backward", "weight"), "pipeline_wait": took("comm"),
                     "boxes": [(b.kind, b.microbatch, b.chunk, b.end - b.start) for b in boxes
                               if b.kind in ("forward", "backward", "weight")]}


def gather_reports(report: dict, mesh) -> list[dict] | None:
    """Collective: every rank's report on rank 0 (None elsewhere)."""
    if mesh.world_size == 1:
        return [report]
    gathered = [None] * mesh.world_size if mesh.rank == 0 else None
    dist.gather_object(report, gathered, dst=0)
    return gathered


def compute_time(report: dict) -> float:
    return report["compute"] if "compute" in report else report["forward"] + report["backward"]


def find_stragglers(reports: list[dict], pct: float, schedule: str = DEFAULT_SCHEDULE, micro_batches: int = 1,
                    virtual_stages: int = 1, contract: str = "overlapped") -> list[dict]:
    """The ranks slower than their peers in one step's reports, each {rank, section, slower_by,
    seconds_lost_per_step}: one check's candidates (StragglerWatch decides which are named)."""
    slowest: dict[tuple[int, int], dict] = {}  # (replica, stage) -> its slowest straggler
    for report in reports:
        peers = peers_of(report, reports)
        if not peers:
            continue
        median = statistics.median(compute_time(r) for r in peers)
        if median <= 0 or compute_time(report) <= (1 + pct / 100) * median:
            continue
        key, slower_by = (report["dp_rank"], report["pp_rank"]), compute_time(report) / median - 1
        if key not in slowest or slower_by > slowest[key]["slower_by"]:
            slowest[key] = {"rank": report["rank"], "section": _worst_section(report, peers), "slower_by": slower_by}
    for straggler in slowest.values():
        report = next(r for r in reports if r["rank"] == straggler["rank"])
        straggler["seconds_lost_per_step"] = _seconds_lost(report, reports, schedule, micro_batches, virtual_stages,
                                                           contract)
    return sorted(slowest.values(), key=lambda s: s["rank"])


def peers_of(report: dict, reports: list[dict]) -> list[dict]:
    """The same stage and TP shard in the other DP replicas."""
    return [r for r in reports if (r["pp_rank"], r["tp_rank"]) == (report["pp_rank"], report["tp_rank"])
            and r["dp_rank"] != report["dp_rank"]]


def _worst_section(report: dict, peers: list[dict]) -> str:
    sections = ("compute",) if "compute" in report else ("forward", "backward")
    return max(sections, key=lambda s: report[s] - statistics.median(r[s] for r in peers))


def _seconds_lost(straggler: dict, reports: list[dict], schedule: str, m: int, v: int, contract: str) -> float:
    if "boxes" not in straggler:  # one stage: the step waits for the slowest replica's compute
        healed = statistics.median(compute_time(r) for r in peers_of(straggler, reports))
        others = [compute_time(r) for r in reports if r["dp_rank"] != straggler["dp_rank"]]
        return max(0.0, max(map(compute_time, reports)) - max(others + [healed]))
    pp = 1 + max(r["pp_rank"] for r in reports)
    ops = schedule_for(schedule, pp, m, v, contract)
    measured = _step(ops, _durations(reports), schedule)
    healed = _durations(reports, heal=straggler)
    return max(0.0, measured - _step(ops, healed, schedule))


def _durations(reports: list[dict], heal: dict | None = None) -> dict[int, dict]:
    """Per DP replica, (stage, kind, micro-batch, chunk) -> seconds (the slowest TP rank's box); with
    `heal`, that rank's stage in its replica takes the stage's median boxes over the other replicas
    (its TP peers included: they wait for it inside every layer, so their boxes are slow too)."""
    replicas: dict[int, dict] = {}
    for report in reports:
        if heal is not None and (report["dp_rank"], report["pp_rank"]) == (heal["dp_rank"], heal["pp_rank"]):
            continue
        table = replicas.setdefault(report["dp_rank"], {})
        for kind, mb, chunk, took in report["boxes"]:
            key = (report["pp_rank"], kind, mb, chunk)
            table[key] = max(table.get(key, 0.0), took)
    if heal is not None:
        stage = heal["pp_rank"]
        others = [r for r in reports if r["pp_rank"] == stage and r["dp_rank"] != heal["dp_rank"]]
        table = replicas.setdefault(heal["dp_rank"], {})
        for kind, mb, chunk, _ in heal["boxes"]:
            values = [took for r in others for k, b, c, took in r["boxes"] if (k, b, c) == (kind, mb, chunk)]
            if values:
                table[(stage, kind, mb, chunk)] = max(table.get((stage, kind, mb, chunk), 0.0), statistics.median(values))
    return replicas


def _step(ops: list, replicas: dict[int, dict], schedule: str) -> float:
    """The pipeline part of a step: the slowest replica's simulated makespan."""
    return max(simulate(ops, durations=table, name=schedule).makespan for table in replicas.values())
