"""What the training loop does to keep a large run understood when it goes wrong: the flight recorder
(step marks, a watchdog, a dump when a step fails), the fault drills of TRIDENT_INJECT, the DP replica
digest check, straggler attribution and loss spikes. The trainer calls `before_step`, `after_update`,
`after_step` and `before_save`; each does nothing between its intervals.
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from pathlib import Path

from trident.parallel.device_clock import CudaClock, HostClock, clock_for
from trident.parallel.flight import FLIGHT
from trident.parallel.inject import Injector
from trident.parallel.replicas import agree_on_findings, replica_mismatches
from trident.text.storage import location
from trident.train.straggler_watch import StragglerWatch
from trident.train.stragglers import gather_reports, rank_report

SPIKE_WINDOW = 20  # steps whose median loss a spike is measured against
STALL_FRACTION = 0.8  # of parallel.timeout_s without progress: the flight recorder's watchdog dumps


class CorruptionError(RuntimeError):
    """DP replicas of a parameter differ: the job stops before a checkpoint could keep the damage."""


class PhaseClock:
    """Seconds of each phase of ParallelModel.train_step (forward_backward, finalize, step), on the
    device's clock (parallel/device_clock.py): marks while the step runs, read once after it."""

    def __init__(self, clock: HostClock | CudaClock | None = None):
        self.clock = clock or HostClock()
        self.marks: list[tuple[str, object]] = []

    def start(self) -> None:
        self.clock.start()
        self.marks = []

    def mark(self, phase: str) -> None:
        self.marks.append((phase, self.clock.mark()))

    @property
    def times(self) -> dict[str, float]:
        """Each phase's seconds (on CUDA: waits for the device once)."""
        self.clock.settle()
        ends = [(phase, self.clock.seconds(mark)) for phase, mark in self.marks]
        return {phase: end - before for (phase, end), before in zip(ends, [0.0] + [e for _, e in ends])}


class RunDiagnostics:
    def __init__(self, config, mesh, model, out: Path, device, log=print):
        self.cfg, self.mesh, self.model, self.device, self.log = config.diagnostics, mesh, model, device, log
        self.parallel, self.out = config.parallel, out
        self.phases, self.boxes = PhaseClock(clock_for(device)), None
        # dump while everything still hangs: before the collectives' timeout ends the stuck op (NCCL's
        # watchdog aborts it then), so the dump shows the op every rank is stuck in
        self.stall_s = STALL_FRACTION * config.parallel.timeout_s
        self.injector = Injector.from_env(mesh.rank)
        self.recent: deque = deque(maxlen=SPIKE_WINDOW)
        FLIGHT.configure(location(out) / "debug" / "flight", mesh.rank,
                         {"world_size": mesh.world_size, "dp": mesh.dp, "pp": mesh.pp, "cp": mesh.cp, "tp": mesh.tp,
                          "dp_rank": mesh.dp_rank, "pp_rank": mesh.pp_rank, "cp_rank": mesh.cp_rank,
                          "tp_rank": mesh.tp_rank},
                         self.cfg.flight_events)
        self.step = 0
        self.straggler_watch = StragglerWatch(self.cfg.straggler_pct, self.cfg.straggler_checks,
                                              self.cfg.straggler_min_cost_pct, schedule=self.parallel.schedule,
                                              virtual_stages=self.parallel.virtual_stages,
                                              contract=model.executor.contract if model.executor else "overlapped")
        if self.injector.slow_seconds(10**12):  # a slow-GPU drill: every forward of this rank's chunks
            for chunk in model.chunks:
                chunk.register_forward_pre_hook(self._slow_forward)
        if model.executor is not None and self.injector.wants("send"):
            model.executor.before_send = lambda: self.injector.before_send(self.step)

    def _slow_forward(self, module, args) -> None:
        time.sleep(self.injector.slow_seconds(self.step))

    # ---- the loop's hooks ------------------------------------------------------------------------
    def start(self) -> None:
        FLIGHT.start_watchdog(self.stall_s)

    def stop(self) -> None:
        FLIGHT.stop_watchdog()

    def before_step(self, step: int) -> list:
        """Mark the step (an open `step` event says a rank is between instructions) and strike faults due."""
        self.step = FLIGHT.step = step
        event = FLIGHT.begin("step")
        self.injector.before_step(step)
        return event

    def after_update(self, step: int, event: list) -> None:
        FLIGHT.end(event)
        self.injector.after_update(step, self.model.held_weights())

    def after_step(self, step: int, record: dict, micro_batches: int, documents=lambda: []) -> None:
        """Interval checks: replica digests, stragglers (adds `stragglers`), loss spikes (adds `spike`)."""
        interval = self.cfg.weight_check_interval
        if interval and step % interval == 0:
            self.check_replicas(step)
        if self.straggler_step(step):
            self._stragglers(step, record, micro_batches)
        self._spike(step, record, documents)

    def straggler_step(self, step: int) -> bool:
        interval = self.cfg.straggler_interval
        return bool(interval) and step % interval == 0 and self.mesh.world_size > 1

    def before_save(self, step: int) -> None:
        """A checkpoint never keeps a corrupted replica: check right before writing one."""
        if self.cfg.weight_check_interval:
            self.check_replicas(step)

    def on_failure(self, reason: str) -> None:
        FLIGHT.dump(reason)

    # ---- checks ----------------------------------------------------------------------------------
    def check_replicas(self, step: int) -> None:
        findings = agree_on_findings(replica_mismatches(self.model.replica_weights(), self.mesh), self.mesh, self.device)
        if not findings:
            return
        first = findings[0]
        who = " or ".join(f"rank {r}" for r in first["ranks"])
        FLIGHT.dump(f"replica digests differ at step {step}")
        raise CorruptionError(
            f"silent corruption at step {step}: parameter {first['param']} differs between data-parallel "
            f"replicas, {who} at fault (digests {first['digests']}){f'; {len(findings) - 1} more' if len(findings) > 1 else ''}"
            f". Stopped before the next checkpoint: resume from the last one (checkpoint.load=auto) after "
            f"excluding the faulty device")

    def _stragglers(self, step: int, record: dict, micro_batches: int) -> None:
        reports = gather_reports(rank_report(self.mesh, self.phases.times, self.boxes), self.mesh)
        self.boxes = None
        if reports is None:
            return
        found = self.straggler_watch.observe(reports, record["step_time_s"], micro_batches)
        record["stragglers"] = found
        record["straggler_seconds_lost"] = sum(f["seconds_lost_per_step"] for f in found)
        for straggler in found:
            self.log(f"straggler at step {step}: rank {straggler['rank']}, {straggler['section']} "
                     f"{straggler['slower_by']:.0%} slower than its peers' median, slow at "
                     f"{straggler['slow_checks']} checks in a row; about "
                     f"{straggler['seconds_lost_per_step']:.3f} s lost per step")

    def _spike(self, step: int, record: dict, documents) -> None:
        """A loss over spike_factor x the recent median: named with its batch's documents (rank 0 logs)."""
        loss = record["loss"]
        if self.cfg.spike_factor and len(self.recent) == self.recent.maxlen:
            median = statistics.median(self.recent)
            if loss > self.cfg.spike_factor * median:
                docs = documents() if self.mesh.rank == 0 else []
                record["spike"] = {"loss": loss, "median": median, "documents": docs}
                shown = ", ".join(d["source"] or f"{d['prefix']} document {d['document']}" for d in docs[:5])
                self.log(f"loss spike at step {step}: {loss:.4f} > {self.cfg.spike_factor:g} x the median "
                         f"{median:.4f} of the last {len(self.recent)} steps; samples {record['samples']}"
                         f"{f', documents {shown}' if shown else ''}{' ...' if len(docs) > 5 else ''}; "
                         f"re-run it with: trident replay {self.out} --step {step}")
        if loss == loss:  # a NaN loss (skipped step) is not part of the baseline
            self.recent.append(loss)
