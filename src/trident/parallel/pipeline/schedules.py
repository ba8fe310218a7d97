"""Pipeline parallelism as data: layer partitioning and schedules (GPipe, 1F1B, interleaved 1F1B).

Everything here is pure: no torch.distributed, no tensors. A schedule is a list, one entry per
pipeline stage, of the instructions that stage executes in order. The p2p executor (`executor.py`)
walks these lists; `simulate.simulate` checks and times them without processes (a discrete-event
model of the executor) and returns the Timeline that `draw.draw_timeline` draws.

Model order of the pp * v *virtual stages*: virtual stage `c * pp + s` is chunk `c` of stage `s`
(Megatron's interleaved assignment), so activations flow 0 -> 1 -> ... -> pp-1 -> 0 (next chunk)
-> ... and gradients flow the opposite way.

Executor contract (what `simulate` models, see docs/pipeline.md):
- Forward/Backward compute one micro-batch through one local chunk.
- Send*/Recv* are point-to-point transfers. Read as a batch (the `batched` contract of
  overlap.py), a maximal run of consecutive Send*/Recv* instructions is posted together and waited
  for before the next compute; schedules here never deadlock under that rule even if every
  transfer is a rendezvous (a send completes only once the peer has posted the matching receive).
  The `overlapped` contract (the executor's default on gloo) posts sends at the same place,
  receives one compute earlier, and waits later, so it cannot deadlock either.
- Between one pair of stages, transfers are matched in list order (as NCCL does), so the i-th
  send from A to B carries the tensor of the i-th receive on B from A.
- A Recv names the local (micro-batch, chunk) it feeds; a Send names the local (micro-batch,
  chunk) that produced it. With pp == 1 neighbouring chunks live on the same stage and the
  executor hands the tensor over locally: no Send/Recv is emitted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from trident.config.pipeline_schedules import INTERLEAVED, ScheduleError


# ----------------------------------------------------------------------------- partitioning

def partition_layers(num_layers: int, pp: int, virtual_stages: int = 1,
                     partition: list[int] | None = None) -> list[list[range]]:
    """Global layer indices held by each stage: result[stage][chunk] is a contiguous range.

    The layers are cut into pp * virtual_stages contiguous blocks in model order; block
    `chunk * pp + stage` goes to chunk `chunk` of stage `stage`. By default the blocks differ by at
    most one layer and the earlier blocks (in model order) take the remainder; `partition` gives
    the layer count of every block explicitly, in model order (zeros allowed, sum = num_layers).
    """
    for name, value in (("num_layers", num_layers), ("pp", pp), ("virtual_stages", virtual_stages)):
        if not is_int(value) or value < 1:
            raise ScheduleError(f"{name} must be a positive integer, got {value!r}")
    blocks = pp * virtual_stages
    if partition is None:
        if num_layers < blocks:
            raise ScheduleError(f"num_layers={num_layers} cannot fill pp x virtual_stages = "
                                f"{pp} x {virtual_stages} = {blocks} blocks with at least one layer each")
        base, extra = divmod(num_layers, blocks)
        sizes = [base + (1 if b < extra else 0) for b in range(blocks)]
    else:
        sizes = list(partition)
        if len(sizes) != blocks:
            raise ScheduleError(f"layer partition has {len(sizes)} entries, expected pp x virtual_stages"
                                f" = {pp} x {virtual_stages} = {blocks} (one per virtual stage, model order)")
        bad = [(i, n) for i, n in enumerate(sizes) if not is_int(n) or n < 0]
        if bad:
            raise ScheduleError(f"layer partition entry {bad[0][0]} is {bad[0][1]!r}; entries must be "
                                f"non-negative integers")
        if sum(sizes) != num_layers:
            raise ScheduleError(f"layer partition {sizes} sums to {sum(sizes)}, but num_layers={num_layers}")
    starts = [sum(sizes[:b]) for b in range(blocks)]
    return [[range(starts[c * pp + s], starts[c * pp + s] + sizes[c * pp + s])
             for c in range(virtual_stages)] for s in range(pp)]


def is_int(value) -> bool:
    """True for an int that is not a bool (schedule sizes and instruction fields)."""
    return isinstance(value, int) and not isinstance(value, bool)


# ----------------------------------------------------------------------------- instructions

@dataclass(frozen=True)
class Forward:
    """Run the forward of `microbatch` through local model chunk `chunk` (keep its activations)."""
    microbatch: int
    chunk: int


@dataclass(frozen=True)
class Backward:
    """Run the backward of `microbatch` through local chunk `chunk` (then free its activations)."""
    microbatch: int
    chunk: int


@dataclass(frozen=True)
class BackwardWeight:
    """Zero-bubble schedules: the weight gradients of (microbatch, chunk)'s linear layers, deferred by
    its Backward (which then computes only the input gradient and the small parameters' gradients)."""
    microbatch: int
    chunk: int


@dataclass(frozen=True)
class SendActivation:
    """Send the output of local (microbatch, chunk) to `to_stage` (the next virtual stage)."""
    microbatch: int
    chunk: int
    to_stage: int


@dataclass(frozen=True)
class RecvActivation:
    """Receive the input of local (microbatch, chunk) from `from_stage` (the previous virtual stage)."""
    microbatch: int
    chunk: int
    from_stage: int


@dataclass(frozen=True)
class SendGrad:
    """Send the gradient of the input of local (microbatch, chunk) to `to_stage`."""
    microbatch: int
    chunk: int
    to_stage: int


@dataclass(frozen=True)
class RecvGrad:
    """Receive the gradient of the output of local (microbatch, chunk) from `from_stage`."""
    microbatch: int
    chunk: int
    from_stage: int


Instruction = Union[Forward, Backward, BackwardWeight, SendActivation, RecvActivation, SendGrad, RecvGrad]
COMPUTE = (Forward, Backward, BackwardWeight)
COMPUTE_KIND = {Forward: "forward", Backward: "backward", BackwardWeight: "weight"}  # -> timeline box kind
SENDS = (SendActivation, SendGrad)
RECVS = (RecvActivation, RecvGrad)
COMMUNICATION = SENDS + RECVS


def next_virtual_stage(stage: int, chunk: int, pp: int, virtual_stages: int) -> tuple[int, int] | None:
    """(stage, chunk) after this one in model order, or None for the last virtual stage."""
    index = chunk * pp + stage + 1
    return None if index == pp * virtual_stages else (index % pp, index // pp)


def prev_virtual_stage(stage: int, chunk: int, pp: int, virtual_stages: int) -> tuple[int, int] | None:
    """(stage, chunk) before this one in model order, or None for the first virtual stage."""
    index = chunk * pp + stage - 1
    return None if index < 0 else (index % pp, index // pp)


# ----------------------------------------------------------------------------- schedules

def gpipe(pp: int, num_microbatches: int) -> list[list[Instruction]]:
    """All forwards, then all backwards (in micro-batch order): every stage stores m activations."""
    _check_args(pp, num_microbatches, 1)
    return [_emit_one_chunk(pp, s, _one_f_one_b_order(num_microbatches, num_microbatches))
            for s in range(pp)]


def one_f_one_b(pp: int, num_microbatches: int, extra_warmup: int = 0) -> list[list[Instruction]]:
    """1F1B (PipeDream-flush / Megatron non-interleaved): stage s runs pp - s - 1 warm-up forwards,
    then alternates one forward and one backward, then drains; at most pp - s activations live.
    `extra_warmup` more warm-up forwards on every stage but the last give each stage that many
    micro-batches of slack: in the steady state a stage no longer waits, every micro-batch, for a
    round trip of messages (send activation, receive gradient); each costs one activation set
    more (overlap.schedule_for uses 1 under the overlapped contract)."""
    _check_args(pp, num_microbatches, 1)
    if not is_int(extra_warmup) or extra_warmup < 0:
        raise ScheduleError(f"extra_warmup must be a non-negative integer, got {extra_warmup!r}")
    return [_emit_one_chunk(pp, s, _one_f_one_b_order(
                num_microbatches, min(pp - s - 1 + (extra_warmup if s < pp - 1 else 0), num_microbatches)))
            for s in range(pp)]


def _one_f_one_b_order(m: int, warmup: int) -> list[Instruction]:
    order: list[Instruction] = [Forward(i, 0) for i in range(warmup)]
    for i in range(m - warmup):
        order += [Forward(warmup + i, 0), Backward(i, 0)]
    return order + [Backward(i, 0) for i in range(m - warmup, m)]


def _emit_one_chunk(pp: int, stage: int, order: list[Instruction]) -> list[Instruction]:
    """Receive right before the compute that consumes, send right after the compute that produces;
    a send followed by the next receive forms one batch (Megatron's send_forward_recv_backward).
    `order` holds Forward and Backward only (zero-bubble lists are placed by zero_bubble.py)."""
    out: list[Instruction] = []
    for op in order:
        if isinstance(op, Forward):
            if stage > 0:
                out.append(RecvActivation(op.microbatch, 0, stage - 1))
            out.append(op)
            if stage < pp - 1:
                out.append(SendActivation(op.microbatch, 0, stage + 1))
        else:
            if stage < pp - 1:
                out.append(RecvGrad(op.microbatch, 0, stage + 1))
            out.append(op)
            if stage > 0:
                out.append(SendGrad(op.microbatch, 0, stage - 1))
    return out


def interleaved_warmup(pp: int, num_microbatches: int, virtual_stages: int, stage: int) -> int:
    """Megatron's warm-up forwards of interleaved 1F1B on `stage` (virtual micro-batches)."""
    total = num_microbatches * virtual_stages
    return min((pp - stage - 1) * 2 + (virtual_stages - 1) * pp, total)


def interleaved_1f1b(pp: int, num_microbatches: int, virtual_stages: int) -> list[list[Instruction]]:
    """Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each stage holds `virtual_stages`
    chunks and walks micro-batches in groups of pp per chunk; bubble shrinks by virtual_stages.
    Needs num_microbatches to be a multiple of pp (Megatron's rule)."""
    _check_args(pp, num_microbatches, virtual_stages)
    problem = INTERLEAVED.micro_batch_problem(pp, (num_microbatches,))
    if problem:
        raise ScheduleError(problem.message)
    return [_InterleavedStage(pp, num_microbatches, virtual_stages, s).build() for s in range(pp)]


class _InterleavedStage:
    """One stage's instruction list, following the step structure of Megatron's
    forward_backward_pipelining_with_interleaving: warm-up forwards, steady (forward, backward),
    cool-down backwards, with one batched exchange after each step."""

    def __init__(self, pp: int, m: int, v: int, stage: int):
        self.pp, self.m, self.v, self.stage = pp, m, v, stage
        self.total = m * v
        self.first, self.last = stage == 0, stage == pp - 1
        self.received_act = [0] * v  # activations arrive per chunk in micro-batch order
        self.received_grad = [0] * v
        self.out: list[Instruction] = []

    def forward_id(self, k: int) -> Forward:
        """Virtual micro-batch k -> (micro-batch, chunk): groups of pp micro-batches per chunk."""
        group, within = divmod(k, self.pp * self.v)
        return Forward(group * self.pp + within % self.pp, within // self.pp)

    def backward_id(self, k: int) -> Backward:
        group, within = divmod(k, self.pp * self.v)
        return Backward(group * self.pp + within % self.pp, self.v - 1 - within // self.pp)

    def chunk_of(self, k: int, forward: bool) -> int:
        within = k % (self.pp * self.v)  # Python modulo also maps negative ids, as Megatron relies on
        chunk = within // self.pp
        return chunk if forward else self.v - 1 - chunk

    def send_act(self, op: Forward) -> None:
        after = next_virtual_stage(self.stage, op.chunk, self.pp, self.v)
        if after is not None and after[0] != self.stage:
            self.out.append(SendActivation(op.microbatch, op.chunk, after[0]))

    def send_grad(self, op: Backward) -> None:
        before = prev_virtual_stage(self.stage, op.chunk, self.pp, self.v)
        if before is not None and before[0] != self.stage:
            self.out.append(SendGrad(op.microbatch, op.chunk, before[0]))

    def recv_act(self, chunk: int) -> None:
        before = prev_virtual_stage(self.stage, chunk, self.pp, self.v)
        if before is not None and before[0] != self.stage:
            self.out.append(RecvActivation(self.received_act[chunk], chunk, before[0]))
            self.received_act[chunk] += 1

    def recv_grad(self, chunk: int) -> None:
        after = next_virtual_stage(self.stage, chunk, self.pp, self.v)
        if after is not None and after[0] != self.stage:
            self.out.append(RecvGrad(self.received_grad[chunk], chunk, after[0]))
            self.received_grad[chunk] += 1

    def build(self) -> list[Instruction]:
        warmup = interleaved_warmup(self.pp, self.m, self.v, self.stage)
        remaining = self.total - warmup
        self.recv_act(0)
        for k in range(warmup):
            op = self.forward_id(k)
            self.out.append(op)
            self.send_act(op)
            next_chunk = self.chunk_of(k + 1, forward=True)
            if k + 1 < self.total and not (self.first and next_chunk == 0):
                self.recv_act(next_chunk)
            if k == warmup - 1 and remaining > 0:
                self.recv_grad(self.v - 1)
        for k in range(remaining):
            self.steady_step(k, warmup + k, last_step=k == remaining - 1)
        if remaining == 0:
            self.recv_grad(self.v - 1)
        for k in range(remaining, self.total):
            op = self.backward_id(k)
            self.out.append(op)
            self.send_grad(op)
            next_chunk = self.chunk_of(k + 1, forward=False)
            if k + 1 < self.total and not (self.last and next_chunk == self.v - 1):
                self.recv_grad(next_chunk)
        return self.out

    def steady_step(self, k: int, forward_k: int, last_step: bool) -> None:
        forward, backward = self.forward_id(forward_k), self.backward_id(k)
        self.out += [forward, backward]
        self.send_act(forward)
        self.send_grad(backward)
        # The first stage's next input comes round from the last stage, pp - 1 steps behind.
        if self.first:
            chunk = self.chunk_of(forward_k - (self.pp - 1), forward=True)
            recv_prev, next_forward_chunk = chunk != self.v - 1, chunk + 1
        else:
            recv_prev, next_forward_chunk = True, self.chunk_of(forward_k + 1, forward=True)
        if self.last:
            chunk = self.chunk_of(k - (self.pp - 1), forward=False)
            recv_next, next_backward_chunk = chunk != 0, chunk - 1
        else:
            recv_next, next_backward_chunk = True, self.chunk_of(k + 1, forward=False)
        if recv_prev and not last_step:
            self.recv_act(next_forward_chunk)
        if recv_next:
            self.recv_grad(next_backward_chunk)


def forward_only(schedule: list[list[Instruction]]) -> list[list[Instruction]]:
    """The schedule without backward work (Backward(Weight), SendGrad, RecvGrad), e.g. for evaluation.
    Still deadlock-free: check with simulate(..., backward=False)."""
    return [[op for op in ops if isinstance(op, (Forward, SendActivation, RecvActivation))] for ops in schedule]


def _check_args(pp: int, num_microbatches: int, virtual_stages: int) -> None:
    for name, value in (("pp", pp), ("num_microbatches", num_microbatches), ("virtual_stages", virtual_stages)):
        if not is_int(value) or value < 1:
            raise ScheduleError(f"{name} must be a positive integer, got {value!r}")


# ----------------------------------------------------------------------------- analysis

def theoretical_bubble(pp: int, num_microbatches: int, virtual_stages: int = 1) -> float:
    """(pp - 1) / (m * v): idle time per stage over its ideal compute time (Narayanan et al. 2021)."""
    _check_args(pp, num_microbatches, virtual_stages)
    return (pp - 1) / (num_microbatches * virtual_stages)


def splits_weight_grads(ops: list[Instruction]) -> bool:
    """Whether a stage's list is a zero-bubble one: its weight gradients run apart, as BackwardWeight."""
    return any(isinstance(op, BackwardWeight) for op in ops)


def peak_inflight(schedule: list[list[Instruction]]) -> list[int]:
    """Per stage, the most (micro-batch, chunk) activation sets stored at once: a Forward stores
    one, its Backward frees it (its BackwardWeight, in a zero-bubble schedule: the deferred weight
    gradients keep the linear layers' inputs). With v chunks each set is 1/v of the stage's layers."""
    peaks = []
    for ops in schedule:
        live = peak = 0
        frees = BackwardWeight if splits_weight_grads(ops) else Backward
        for op in ops:
            if isinstance(op, Forward):
                live += 1
                peak = max(peak, live)
            elif isinstance(op, frees):
                live -= 1
        peaks.append(peak)
    return peaks
