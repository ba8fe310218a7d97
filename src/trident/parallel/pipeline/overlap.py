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
- `overlapped` (Megatron's overlapped p2p): a send is posted as soon as its output exists (its
  place in the list, right after the compute that produced it) and waited for only before the
  compute after the next one, so it runs behind one compute; a receive is posted one compute
  before its place in the list (so it is in flight during that compute) and waited for right
  before the compute that consumes it. Posts keep list order, so the i-th send from A to B still
  meets the i-th receive on B from A.
Posts never block, and against `batched` every post happens no later and every wait no earlier;
so a schedule that cannot hang under `batched` cannot hang under `overlapped` either
(`simulate.simulate(..., contract=...)` checks both).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Union

from trident.parallel.pipeline.schedules import (COMMUNICATION, COMPUTE, RECVS, Backward, Forward, Instruction,
                                                 RecvActivation, ScheduleError)

CONTRACTS = ("batched", "overlapped")


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


def build_plan(ops: list[Instruction], contract: str = "overlapped") -> list[Action]:
    """One stage's instruction list as Post/Wait/Run actions under `contract` (see module docstring).
    Every transfer is posted once and waited for once; every compute is run once, in list order."""
    if contract not in CONTRACTS:
        raise ScheduleError(f"unknown pipeline contract {contract!r}; choose one of {', '.join(CONTRACTS)}")
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
    for index, op in enumerate(ops):
        if not isinstance(op, COMMUNICATION):
            continue
        place = bisect_left(computes, index)  # the gap the list puts it in
        if isinstance(op, RECVS):
            posts[max(place - 1, 0)].append(index)  # one compute early
            waits[gap_of_compute[consumer(ops, index)]].append(index)
        else:
            posts[place].append(index)  # its output exists now
            waits[min(place + 1, len(computes))].append(index)  # behind the next compute
    plan: list[Action] = []
    for g in range(len(computes) + 1):
        if posts[g]:
            plan.append(Post(tuple(sorted(posts[g]))))
        plan += [Wait(i) for i in waits[g]]
        if g < len(computes):
            plan.append(Run(computes[g]))
    return plan


def last_backwards(ops: list[Instruction]) -> dict[int, int]:
    """chunk -> position of its last Backward in the list: after it, that chunk's gradients for
    the step are final (the hook for overlapping the data-parallel reduction)."""
    return {op.chunk: index for index, op in enumerate(ops) if isinstance(op, Backward)}
