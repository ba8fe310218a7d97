"""Checking and simulating pipeline schedules (no processes): every micro-batch forwarded and
backwarded once per chunk, sends matched to receives, no stage waiting on itself, and a
discrete-event timeline of the executor's plan (overlap.py: batched or overlapped transfers)."""
from __future__ import annotations

from trident.parallel.pipeline.overlap import Post, Wait, build_plan
from trident.parallel.pipeline.schedules import (COMMUNICATION, COMPUTE, COMPUTE_KIND, RECVS, SENDS, Backward,
                                                 BackwardWeight, Forward, Instruction, RecvActivation, RecvGrad,
                                                 ScheduleError, SendActivation, SendGrad, is_int, next_virtual_stage,
                                                 prev_virtual_stage, splits_weight_grads)
from trident.parallel.pipeline.timeline import Box, Timeline


# ----------------------------------------------------------------------------- checking and simulation

def check_schedule(schedule: list[list[Instruction]], backward: bool = True) -> tuple[int, int]:
    """Raise ScheduleError unless every stage forwards then backwards every (micro-batch, chunk)
    exactly once (only forwards, and nothing backward, if backward=False), receives each input/gradient before using it (no stage waits on itself), sends
    only what it has computed, to the right neighbour, and the i-th send from A to B matches the
    i-th receive on B from A. Returns (num_microbatches, virtual_stages)."""
    pp = len(schedule)
    if pp == 0 or not all(schedule):
        raise ScheduleError("schedule must have at least one stage and no empty stage")
    for stage, ops in enumerate(schedule):
        for index, op in enumerate(ops):
            if not isinstance(op, COMPUTE + COMMUNICATION):
                raise ScheduleError(f"stage {stage}, instruction {index}: {op!r} is not a pipeline instruction")
            if not (is_int(op.microbatch) and is_int(op.chunk) and op.microbatch >= 0 and op.chunk >= 0):
                raise ScheduleError(f"{_at(stage, index, op)}: micro-batch and chunk must be non-negative integers")
            if not backward and isinstance(op, (Backward, BackwardWeight, SendGrad, RecvGrad)):
                raise ScheduleError(f"{_at(stage, index, op)}: backward work in a forward-only schedule")
    m = 1 + max(op.microbatch for ops in schedule for op in ops)
    v = 1 + max(op.chunk for ops in schedule for op in ops)
    for stage, ops in enumerate(schedule):
        required = COMPUTE if splits_weight_grads(ops) else (Forward, Backward)
        _check_stage(stage, ops, pp, m, v, required if backward else (Forward,))
    _match_transfers(schedule, v)
    return m, v


def _check_stage(stage: int, ops: list[Instruction], pp: int, m: int, v: int, required: tuple) -> None:
    done: set = set()  # (type, microbatch, chunk) already executed on this stage
    for index, op in enumerate(ops):
        key = (type(op), op.microbatch, op.chunk)
        if key in done:
            raise ScheduleError(f"{_at(stage, index, op)}: repeated")
        before = prev_virtual_stage(stage, op.chunk, pp, v)
        after = next_virtual_stage(stage, op.chunk, pp, v)
        needs = []
        if isinstance(op, Forward) and before is not None:
            needs = [(Forward, op.chunk - 1) if before[0] == stage else (RecvActivation, op.chunk)]
        elif isinstance(op, Backward):
            needs = [(Forward, op.chunk)]
            if after is not None:
                needs.append((Backward, op.chunk + 1) if after[0] == stage else (RecvGrad, op.chunk))
        elif isinstance(op, BackwardWeight):
            needs = [(Backward, op.chunk)]
        elif isinstance(op, SENDS):
            needs = [(Forward if isinstance(op, SendActivation) else Backward, op.chunk)]
        for kind, chunk in needs:
            if (kind, op.microbatch, chunk) not in done:
                raise ScheduleError(f"{_at(stage, index, op)}: needs {kind.__name__}(microbatch={op.microbatch}, chunk={chunk})"
                                    f" earlier on the same stage, which would wait on itself")
        if isinstance(op, COMMUNICATION):
            peer_of = {SendActivation: after, RecvGrad: after, RecvActivation: before, SendGrad: before}[type(op)]
            peer = op.to_stage if isinstance(op, SENDS) else op.from_stage
            if peer_of is None or peer_of[0] != peer or peer == stage:
                raise ScheduleError(f"{_at(stage, index, op)}: wrong peer {peer}; model order says "
                                    f"{'none' if peer_of is None or peer_of[0] == stage else peer_of[0]}")
        done.add(key)
    missing = [(kind.__name__, mb, c) for kind in required for mb in range(m) for c in range(v)
               if (kind, mb, c) not in done]
    if missing:
        raise ScheduleError(f"stage {stage}: never runs {missing[0][0]}(microbatch={missing[0][1]}, "
                            f"chunk={missing[0][2]}) ({len(missing)} compute instructions missing)")


def _at(stage: int, index: int, op: Instruction) -> str:
    return f"stage {stage}, instruction {index} {op}"


def _match_transfers(schedule: list[list[Instruction]], v: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(stage, index) of every transfer -> (peer, index) of its partner, matched in order per
    ordered pair of stages; raises if the two sides disagree on what they carry."""
    pp = len(schedule)
    sends: dict[tuple[int, int], list] = {}
    recvs: dict[tuple[int, int], list] = {}
    for stage, ops in enumerate(schedule):
        for index, op in enumerate(ops):
            if isinstance(op, SendActivation):
                target = next_virtual_stage(stage, op.chunk, pp, v)
                sends.setdefault((stage, op.to_stage), []).append((index, op, ("act", op.microbatch, target[1])))
            elif isinstance(op, SendGrad):
                target = prev_virtual_stage(stage, op.chunk, pp, v)
                sends.setdefault((stage, op.to_stage), []).append((index, op, ("grad", op.microbatch, target[1])))
            elif isinstance(op, RECVS):
                label = ("act" if isinstance(op, RecvActivation) else "grad", op.microbatch, op.chunk)
                recvs.setdefault((op.from_stage, stage), []).append((index, op, label))
    partner = {}
    for channel in sorted(set(sends) | set(recvs)):
        src, dst = channel
        out, inn = sends.get(channel, []), recvs.get(channel, [])
        for (i, send, label), (j, recv, got) in zip(out, inn):
            if label != got:
                raise ScheduleError(f"transfer mismatch {src}->{dst}: stage {src} instruction {i} {send} "
                                    f"meets stage {dst} instruction {j} {recv}")
            partner[(src, i)], partner[(dst, j)] = (dst, j), (src, i)
        if len(out) != len(inn):
            extra = (src, out[len(inn)]) if len(out) > len(inn) else (dst, inn[len(out)])
            raise ScheduleError(f"stage {extra[0]} instruction {extra[1][0]} {extra[1][1]} has no matching "
                                f"{'receive' if len(out) > len(inn) else 'send'} on stage "
                                f"{dst if extra[0] == src else src}")
    return partner


def simulate(schedule: list[list[Instruction]], forward_time: float = 1.0, backward_time: float = 2.0,
             comm_time: float = 0.0, name: str = "", backward: bool = True,
             contract: str = "overlapped", durations: dict | None = None,
             weight_fraction: float = 0.5) -> Timeline:
    """Discrete-event run of `schedule` as the executor runs it: each stage's actions from
    overlap.build_plan(ops, contract), posts never blocking, every transfer a rendezvous that
    completes comm_time after both sides posted it, a Wait blocking until then. forward_time and
    backward_time are one micro-batch through a whole stage; each of its v chunks takes 1/v of it. In a
    zero-bubble schedule (with BackwardWeight) a Backward takes 1 - weight_fraction of backward_time and
    a BackwardWeight (box kind "weight") the rest.
    backward=False checks a forward-only schedule (see forward_only). `durations` maps
    (stage, "forward" | "backward" | "weight", microbatch, chunk) to that box's own time (e.g. its measured
    cost, to replay a real step as if every stage had a core of its own); boxes it omits take the
    uniform times. Returns a timeline.Timeline (compute boxes; a `send`/`recv` box per transfer from its post to
    its completion; a `comm` box wherever a stage is blocked in a Wait); raises ScheduleError
    naming each blocked stage and the instruction it waits on if the schedule deadlocks."""
    for label, value in (("forward_time", forward_time), ("backward_time", backward_time), ("comm_time", comm_time)):
        if not isinstance(value, (int, float)) or value < 0 or (label != "comm_time" and value == 0):
            raise ScheduleError(f"{label} must be a {'non-negative' if label == 'comm_time' else 'positive'}"
                                f" number, got {value!r}")
    m, v = check_schedule(schedule, backward)
    plans = [build_plan(ops, contract) for ops in schedule]
    chunk_backward = backward_time / v
    split = any(splits_weight_grads(ops) for ops in schedule)
    if split and (not isinstance(weight_fraction, (int, float)) or not 0 < weight_fraction < 1):
        raise ScheduleError(f"weight_fraction must be between 0 and 1 (exclusive), got {weight_fraction!r}")
    times = {Forward: forward_time / v, Backward: chunk_backward * (1 - weight_fraction if split else 1),
             BackwardWeight: chunk_backward * weight_fraction}
    run = _Run(schedule, plans, _match_transfers(schedule, v), times, comm_time, durations or {})
    while any([run.advance(stage) for stage in range(len(schedule))]):
        pass  # each pass moves every stage as far as it can; stop when none can move
    blocked = [run.blocked_reason(s) for s in range(len(schedule)) if run.pc[s] < len(plans[s])]
    if blocked:
        raise ScheduleError("pipeline deadlock: " + "; ".join(blocked))
    return Timeline(num_stages=len(schedule), num_microbatches=m, virtual_stages=v, schedule=name,
                    source="simulated", boxes=run.boxes)


class _Run:
    """State of one simulation: per stage the next action, its clock, and when each transfer was posted."""

    def __init__(self, schedule, plans, partner, times: dict, comm_time: float, durations: dict):
        self.schedule, self.plans, self.partner, self.comm_time = schedule, plans, partner, comm_time
        self.duration = times  # instruction type -> time of one box
        self.durations = durations  # (stage, kind, microbatch, chunk) -> time of that box, if given
        self.posted: dict[tuple[int, int], float] = {}  # (stage, list position) -> post time
        self.pc = [0] * len(schedule)
        self.clock = [0.0] * len(schedule)
        self.boxes: list[Box] = []

    def advance(self, s: int) -> bool:
        """Run stage s as far as it can go; True if it moved."""
        moved = False
        while self.pc[s] < len(self.plans[s]):
            action = self.plans[s][self.pc[s]]
            if isinstance(action, Post):
                self.posted.update({(s, i): self.clock[s] for i in action.indices})
            elif isinstance(action, Wait):
                if not self.wait(s, action.index):
                    return moved
            else:
                op = self.schedule[s][action.index]
                kind = COMPUTE_KIND[type(op)]
                took = self.durations.get((s, kind, op.microbatch, op.chunk), self.duration[type(op)])
                end = self.clock[s] + took
                self.boxes.append(Box(s, kind, op.microbatch, op.chunk, self.clock[s], end))
                self.clock[s] = end
            self.pc[s], moved = self.pc[s] + 1, True
        return moved

    def wait(self, s: int, i: int) -> bool:
        """Complete stage s's wait on transfer i if its partner has posted (a rendezvous); else False."""
        peer = self.partner[(s, i)]
        if peer not in self.posted:
            return False
        op = self.schedule[s][i]
        done = max(self.posted[(s, i)], self.posted[peer]) + self.comm_time
        kind = "send" if isinstance(op, SENDS) else "recv"
        self.boxes.append(Box(s, kind, op.microbatch, op.chunk, self.posted[(s, i)], done))
        if done > self.clock[s]:
            self.boxes.append(Box(s, "comm", op.microbatch, op.chunk, self.clock[s], done))
            self.clock[s] = done
        return True

    def blocked_reason(self, stage: int) -> str:
        action = self.plans[stage][self.pc[stage]]
        i = action.index
        peer, j = self.partner[(stage, i)]
        return (f"stage {stage} waits at instruction {i} {self.schedule[stage][i]} for stage {peer} "
                f"to reach instruction {j} {self.schedule[peer][j]}")
