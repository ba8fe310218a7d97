"""Zero-bubble pipeline schedules ZB-H1 and ZB-H2 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism").

Each backward is split in two: `Backward` computes the input gradient (and the small parameters'),
which the previous stage waits for, and `BackwardWeight` the linear layers' weight gradients, which
nothing waits for, so they fill the time 1F1B leaves idle. With forward f, input gradient B and
weight gradient W per micro-batch and stage, 1F1B takes (m + pp - 1)(f + B + W); ZB-H1, at 1F1B's
memory plus the overlapped contract's slack, m (f + B + W) + (pp - 1)(f + B - W); ZB-H2, holding
pp - 1 micro-batches more on every stage, m (f + B + W) + (pp - 1) f for m >= pp (only the fill of
the first forwards is left). At f = B = W both are a bubble of (pp - 1) / (3 m) instead of
(pp - 1) / m (what that gives with measured f : B : W is in docs/pipeline.md).

The order of each stage's list is found once, by a list-scheduling pass under unit costs (f = B = W
= 1, free messages): a stage runs a Backward when its gradient is there, else a Forward when its
input is there and fewer than `pp - s + extra_inflight` micro-batches hold activations (counted
until their BackwardWeight: the deferred weight gradients keep the linear layers' inputs), else its
oldest pending BackwardWeight. ZB-H1 is extra_inflight = the contract's slack (overlapped 1, as
1F1B's; batched 0: exactly 1F1B's memory); it reaches its bound at pp = 2. ZB-H2 is pp - 1 more
(stage 0 holds 2 pp - 1 + slack, the paper's H2 peak); it reaches its bound at every pp and m >= pp.

Transfers are placed by the times of that same pass, so that batched exchanges (NCCL: each run of
transfers posted and waited for together, a send done only when its receive is posted) pair up: a
send goes right after the compute that produces it (at unit time t), and its receive into the
peer's list at the gap that spans t (between the peer's compute ending at or before t and the one
starting at or after it), so both sides post it at the same moment of the step. Placed right
before the consumer instead (1F1B's rule), a send waited on until the peer had finished whatever
weight gradients came first, and batched ZB-H1 was slower than 1F1B in the simulator; paired, it is
faster than 1F1B at every pp and m the tests simulate. With unit costs no
batched exchange waits for its peer, so both schedules reach their bounds batched too; with uneven
costs the moments drift apart, which ZB-H2's fuller steady state cannot absorb over long steps
(batched ZB-H2 can fall behind 1F1B; the simulated figures are in docs/pipeline.md). On NCCL with
uneven costs, prefer ZB-H1.
The overlapped contract posts each send after its producer and each receive one compute before
its place anyway.
"""
from __future__ import annotations

from bisect import bisect_left

from trident.config.pipeline_schedules import SPECS
from trident.parallel.pipeline.schedules import (Backward, BackwardWeight, Forward, Instruction, RecvActivation,
                                                 RecvGrad, ScheduleError, SendActivation, SendGrad, _check_args,
                                                 is_int)

ZERO_BUBBLE_SCHEDULES = tuple(name for name, spec in SPECS.items() if spec.splits_weight_grads)
_INSTRUCTION = {"F": Forward, "B": Backward, "W": BackwardWeight}  # the list pass's kinds


def zero_bubble(name: str, pp: int, num_microbatches: int, slack: int) -> list[list[Instruction]]:
    """The lists of zero-bubble schedule `name` with `slack` (the contract's) micro-batches in flight
    beyond its memory: ZB-H1 pp - s on stage s, ZB-H2 2 pp - 1 - s."""
    if name not in ZERO_BUBBLE_SCHEDULES:
        raise ScheduleError(f"unknown zero-bubble schedule {name!r}; choose one of {', '.join(ZERO_BUBBLE_SCHEDULES)}")
    if not is_int(slack) or slack < 0:
        raise ScheduleError(f"slack must be a non-negative integer, got {slack!r}")
    return list_scheduled(pp, num_microbatches, slack + SPECS[name].extra_inflight(pp))


def list_scheduled(pp: int, num_microbatches: int, extra_inflight: int = 1) -> list[list[Instruction]]:
    """The instruction lists of the list-scheduling pass, stage s holding at most pp - s +
    `extra_inflight` micro-batches (see module docstring)."""
    _check_args(pp, num_microbatches, 1)
    if not is_int(extra_inflight) or extra_inflight < 0:
        raise ScheduleError(f"extra_inflight must be a non-negative integer, got {extra_inflight!r}")
    orders, spans = _list_schedule(pp, num_microbatches, extra_inflight)
    return _emit_paired(orders, spans)


def zero_bubble_theory(pp: int, num_microbatches: int) -> float:
    """The zero-bubble bound's bubble at f = B = W: (pp - 1) / (3 m), idle time over compute as
    Timeline measures it (ZB-H1 reaches it at pp = 2, ZB-H2 at every pp for m >= pp)."""
    _check_args(pp, num_microbatches, 1)
    return (pp - 1) / (3 * num_microbatches)


def _list_schedule(pp: int, m: int, extra: int) -> tuple[list[list[Instruction]], list[list[tuple]]]:
    """Each stage's compute order from an event-driven pass under unit costs (ties: earliest stage),
    with each compute's (start, end) in that pass."""
    done: dict[tuple, float] = {}  # (stage, kind, microbatch) -> end time
    clock = [0.0] * pp
    count = {kind: [0] * pp for kind in _INSTRUCTION}  # kind -> per-stage count of those run
    orders: list[list[Instruction]] = [[] for _ in range(pp)]
    spans: list[list[tuple]] = [[] for _ in range(pp)]
    for _ in range(3 * m * pp):
        best = None
        for s in range(pp):
            choice = _next_op(s, pp, m, extra, clock[s], done, count["F"][s], count["B"][s], count["W"][s])
            if choice is not None and (best is None or choice[0] < best[1][0]):
                best = (s, choice)
        if best is None:
            raise ScheduleError(f"zero-bubble list scheduling stalled (pp={pp}, m={m})")
        s, (start, kind, mb) = best
        clock[s] = start + 1.0
        done[(s, kind, mb)] = clock[s]
        orders[s].append(_INSTRUCTION[kind](mb, 0))
        spans[s].append((start, clock[s]))
        count[kind][s] += 1
    return orders, spans


def _emit_paired(orders: list[list[Instruction]], spans: list[list[tuple]]) -> list[list[Instruction]]:
    """The lists with transfers placed by time (module docstring): a send right after its producer,
    its receive at the peer's gap spanning the send's time; within a gap, in time order, sends first."""
    pp = len(orders)
    starts = [[start for start, _ in stage] for stage in spans]
    gaps: list[list[list]] = [[[] for _ in range(len(order) + 1)] for order in orders]  # gap g: before compute g
    for s in range(pp):
        for k, op in enumerate(orders[s]):
            peer = s + 1 if isinstance(op, Forward) else s - 1
            if isinstance(op, BackwardWeight) or not 0 <= peer < pp:
                continue  # weight gradients stay local; the ends of the pipeline send nothing further
            send, recv = (SendActivation, RecvActivation) if isinstance(op, Forward) else (SendGrad, RecvGrad)
            time = spans[s][k][1]
            gaps[s][k + 1].append((time, 0, send(op.microbatch, 0, peer)))
            gaps[peer][_gap_spanning(starts[peer], time)].append((time, 1, recv(op.microbatch, 0, s)))
    out = []
    for s in range(pp):
        ops: list[Instruction] = []
        for g, placed in enumerate(gaps[s]):
            ops += [instruction for _, _, instruction in sorted(placed, key=lambda item: item[:2])]
            ops += orders[s][g:g + 1]
        out.append(ops)
    return out


def _gap_spanning(starts: list[float], time: float) -> int:
    """The first gap g (before compute g; len(starts): after the last) the stage is in at or after
    `time`: the one spanning it, or the one right after the compute running then."""
    return bisect_left(starts, time)


def _next_op(s, pp, m, extra, now, done, forwards, backwards, weights):
    """(start time, kind, microbatch) of what stage s would run next, by priority B > F > W."""
    options = []
    if backwards < forwards:
        ready = done.get((s + 1, "B", backwards)) if s < pp - 1 else done[(s, "F", backwards)]
        if ready is not None:
            options.append((max(now, ready), 0, "B", backwards))
    if forwards < m and forwards - weights < pp - s + extra:
        ready = done.get((s - 1, "F", forwards)) if s > 0 else 0.0
        if ready is not None:
            options.append((max(now, ready), 1, "F", forwards))
    if weights < backwards:
        options.append((now, 2, "W", weights))
    if not options:
        return None
    start = min(option[0] for option in options)
    _, _, kind, mb = min((o for o in options if o[0] <= start), key=lambda o: o[1])
    return start, kind, mb
