"""When each transfer of a schedule is posted and when it is waited for: the executor's plan.

A schedule (schedules.py) says *what* a stage does in order; a plan turns one stage's list into
actions the executor performs one after another and the simulator models:
- `Post(indices)`: start these transfers (non-blocking isend/irecv, one `batch_isend_irecv`);
- `Wait(index)`: block until that transfer is done (its tensor can be used or freed);
- `Run(index)`: run that Forward or Backward.
`index` is always the instruction's position in the stage's list, so the plan adds no data of its
own: the schedule stays the single source of truth.

Two contracts:
- `batched`: each maximal run of Send*/Recv* is posted at its place and waited for at once, before
  the next compute (the contract the schedules are built against; kept for NCCL, whose p2p ops
  run in order on one stream, so posting receives early would need its own proof).
- `overlapped` (Megatron's overlapped p2p): a send is posted as soon as its output exists (right
  after the compute that produced it, even where the list, built for batched exchanges, puts it
  after a later compute: interleaved 1F1B's steady step sends a forward's output only after the
  backward that follows it) and waited for only before the compute after the next one, so it runs
  behind one compute; a receive is posted one compute before its place in the list (so it is in
  flight during that compute) and waited for right before the compute that consumes it. Posts keep
  list order per direction and peer (a transfer is never posted before an earlier-listed one of
  its kind to the same peer), so the i-th send from A to B still meets the i-th receive on B from A.
Posts never block, and against `batched` every post happens no later and every wait no earlier;
so a schedule that cannot hang under `batched` cannot hang under `overlapped` either
(`simulate.simulate(..., contract=...)` checks both).

`schedule_for(name, pp, m, v, contract)` is the instruction list each contract runs: the schedule
itself, except that 1F1B under `overlapped` takes OVERLAPPED_EXTRA_WARMUP more warm-up forward on
every stage but the last. Without it 1F1B's steady state has no slack: each micro-batch a stage
waits for a full round trip (its activation out, the gradient back), so every transfer's latency
adds to the step; with it the next activation is already there. Batched exchanges cannot use it
(the send of the extra forward would pair with a receive the peer posts a whole backward later).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Union

from trident.parallel.pipeline.registry import build_schedule
from trident.parallel.pipeline.schedules import (COMMUNICATION, COMPUTE, RECVS, Backward, BackwardWeight, Forward,
                                                 Instruction, RecvActivation, ScheduleError, SendActivation)

CONTRACTS = ("batched", "overlapped")
OVERLAPPED_EXTRA_WARMUP = 1  # 1F1B's slack under the overlapped contract (one activation set more)


@dataclass(frozen=True)
class Post:
    """Start the transfers at these list positions together (never blocks)."""
    indices: tuple[int, ...]


@dataclass(frozen=True)
class Wait:
    """Block until the transfer at this list position is done."""
    index: int


@dataclass(frozen=True)
class Run:
    """Run the Forward or Backward at this list position."""
    index: int


Action = Union[Post, Wait, Run]


def consumer(ops: list[Instruction], index: int) -> int:
    """Position of the compute that uses what the receive at `index` brings (the Forward of its
    (micro-batch, chunk) for an activation, the Backward for a gradient)."""
    op = ops[index]
    wanted = (Forward if isinstance(op, RecvActivation) else Backward)(op.microbatch, op.chunk)
    for later in range(index + 1, len(ops)):
        if ops[later] == wanted:
            return later
    raise ScheduleError(f"instruction {index} {op}: nothing after it consumes {wanted}")


def check_contract(contract: str) -> None:
    """Raise ScheduleError unless `contract` is one of CONTRACTS."""
    if contract not in CONTRACTS:
        raise ScheduleError(f"unknown pipeline contract {contract!r}; choose one of {', '.join(CONTRACTS)}")


def producer(ops: list[Instruction], index: int) -> int:
    """Position of the compute whose tensor the send at `index` carries (the Forward of its
    (micro-batch, chunk) for an activation, the Backward for a gradient)."""
    op = ops[index]
    wanted = (Forward if isinstance(op, SendActivation) else Backward)(op.microbatch, op.chunk)
    for earlier in range(index - 1, -1, -1):
        if ops[earlier] == wanted:
            return earlier
    raise ScheduleError(f"instruction {index} {op}: nothing before it produces {wanted}")


def schedule_for(name: str, pp: int, num_microbatches: int, virtual_stages: int,
                 contract: str) -> list[list[Instruction]]:
    """The schedule as `contract` runs it (see module docstring: 1F1B overlapped takes slack, and so
    do the zero-bubble schedules, one more micro-batch in flight; registry.build_schedule)."""
    check_contract(contract)
    slack = OVERLAPPED_EXTRA_WARMUP if contract == "overlapped" else 0
    return build_schedule(name, pp, num_microbatches, virtual_stages, slack)


def build_plan(ops: list[Instruction], contract: str = "overlapped") -> list[Action]:
    """One stage's instruction list as Post/Wait/Run actions under `contract` (see module docstring).
    Every transfer is posted once and waited for once; every compute is run once, in list order."""
    check_contract(contract)
    return _batched(ops) if contract == "batched" else _overlapped(ops)


def _batched(ops: list[Instruction]) -> list[Action]:
    plan: list[Action] = []
    run: list[int] = []
    for index, op in enumerate(ops + [None]):
        if op is not None and isinstance(op, COMMUNICATION):
            run.append(index)
            continue
        if run:
            plan += [Post(tuple(run))] + [Wait(i) for i in run]
            run = []
        if op is not None:
            plan.append(Run(index))
    return plan


def _overlapped(ops: list[Instruction]) -> list[Action]:
    computes = [i for i, op in enumerate(ops) if isinstance(op, COMPUTE)]
    # Gap g is the moment just before computes[g]; gap len(computes) is the end of the list.
    gap_of_compute = {index: g for g, index in enumerate(computes)}
    posts: list[list[int]] = [[] for _ in range(len(computes) + 1)]
    waits: list[list[int]] = [[] for _ in range(len(computes) + 1)]
    latest: dict[tuple, int] = {}  # (kind, peer) -> gap of the last post: posts keep list order per peer
    for index, op in enumerate(ops):
        if not isinstance(op, COMMUNICATION):
            continue
        place = bisect_left(computes, index)  # the gap the list puts it in
        if isinstance(op, RECVS):
            channel = ("recv", op.from_stage)
            gap = max(place - 1, 0, latest.get(channel, 0))  # one compute early
            waits[gap_of_compute[consumer(ops, index)]].append(index)
        else:
            channel = ("send", op.to_stage)
            gap = max(gap_of_compute[producer(ops, index)] + 1, latest.get(channel, 0))  # its output exists
            waits[min(gap + 1, len(computes))].append(index)  # behind the next compute
        posts[gap].append(index)
        latest[channel] = gap
    plan: list[Action] = []
    for g in range(len(computes) + 1):
        if posts[g]:
            plan.append(Post(tuple(sorted(posts[g]))))
        plan += [Wait(i) for i in waits[g]]
        if g < len(computes):
            plan.append(Run(computes[g]))
    return plan


def last_backwards(ops: list[Instruction]) -> dict[int, int]:
    """chunk -> position of its last Backward (or BackwardWeight) in the list: after it, that chunk's
    gradients for the step are final (the hook for overlapping the data-parallel reduction)."""
    return {op.chunk: index for index, op in enumerate(ops) if isinstance(op, (Backward, BackwardWeight))}
