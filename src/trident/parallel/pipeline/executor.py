"""Runs a pipeline schedule (schedules.py) on real ranks with point-to-point messages.

Needs pp >= 2 (every chunk's neighbours live on other ranks). The executor performs the actions of
overlap.build_plan for this stage's list, under one of its contracts: `overlapped` (sends posted
as soon as their output exists, receives posted one compute early, each transfer waited for only
where its tensor is needed; the default on gloo) or `batched` (each run of transfers posted and
waited for together; the default on NCCL). `simulate.simulate` models the same plan, and the
executor's `trace` (what it did, in order) equals it. Activation shapes are known to every stage
(fixed by the config, [s or s/tp, micro_batch, hidden], or given per micro-batch for evaluation),
so a receive is posted early with no shape handshake. An output sent to the next stage keeps only
its autograd graph (its data is freed once the send is done, as Megatron's output deallocation);
a micro-batch's activations are dropped as soon as its backward has run, or, without backward, as
soon as they are sent.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.autograd import Variable

from trident.parallel.flight import FLIGHT
from trident.parallel.pipeline.overlap import Post, Wait, build_plan, check_contract, last_backwards, schedule_for
from trident.parallel.pipeline.registry import schedule as registered
from trident.parallel.pipeline.schedules import (COMPUTE_KIND, SENDS, Backward, BackwardWeight, Forward,
                                                 RecvActivation, RecvGrad, SendActivation, SendGrad,
                                                 forward_only)
from trident.parallel.pipeline.timeline import TimelineRecorder
from trident.parallel.watch import watched
from trident.parallel.weight_grad import deferring_weight_grads, flush


def default_contract(group) -> str:
    """`batched` on NCCL (its p2p ops run in order on one stream: early receives are not proven
    safe there), `overlapped` on every other backend (gloo: each transfer progresses on its own)."""
    try:
        backend = dist.get_backend(group)
    except (RuntimeError, ValueError):  # no real process group (e.g. a rehearsal's fake one)
        return "overlapped"
    return "batched" if backend == "nccl" else "overlapped"


class PipelineExecutor:
    """Forward/backward of one step's micro-batches through this rank's model chunks. With a
    `recorder`, every compute instruction of a run is timed into it while it is recording."""

    def __init__(self, chunks: list, mesh, schedule: str, activation_shape: tuple[int, ...],
                 dtype: torch.dtype, device: torch.device, autocast=nullcontext,
                 recorder: TimelineRecorder | None = None, contract: str | None = None):
        self.chunks, self.mesh, self.schedule_name = chunks, mesh, schedule
        self.zero_bubble = registered(schedule).spec.splits_weight_grads
        self._steps = {Forward: self.forward, Backward: self.backward, BackwardWeight: self.weight}
        self.v = len(chunks)
        self.shape, self.dtype, self.device, self.autocast = activation_shape, dtype, device, autocast
        self.recorder = recorder
        self.before_send = None  # called before any send is posted (a fault drill's hook: TRIDENT_INJECT)
        self.set_contract(contract or default_contract(mesh.group("pp")))
        self.trace: list = []  # the Post/Wait/Run actions of the last run, in the order performed

    def set_contract(self, contract: str) -> None:
        """Run later steps under `contract` (one of overlap.CONTRACTS)."""
        check_contract(contract)
        self.contract = contract
        self._plans: dict[tuple[int, bool], tuple[list, list]] = {}

    def plan(self, num_microbatches: int, backward: bool) -> tuple[list, list]:
        """(this stage's instruction list, its actions under self.contract), cached per shape of step."""
        key = (num_microbatches, backward)
        if key not in self._plans:
            full = schedule_for(self.schedule_name, self.mesh.pp, num_microbatches, self.v, self.contract)
            ops = (full if backward else forward_only(full))[self.mesh.pp_rank]
            self._plans[key] = (ops, build_plan(ops, self.contract))
        return self._plans[key]

    def is_first(self, chunk: int) -> bool:
        return self.mesh.pp_rank == 0 and chunk == 0

    def is_last(self, chunk: int) -> bool:
        return self.mesh.is_last_stage and chunk == self.v - 1

    @property
    def recording(self) -> bool:
        return self.recorder is not None and self.recorder.recording

    def run(self, batches: list, loss_divisor: int, loss_scale: float = 1.0, backward: bool = True,
            shapes: list[tuple[int, ...]] | None = None, on_output=None,
            on_chunk_backward_done=None) -> torch.Tensor:
        """Sum over micro-batches of mean token loss / loss_divisor (non-zero on the last stage only).
        Forward only, with `on_output`: the last stage hands each micro-batch's output (logits) to
        on_output(index, output) instead of computing a loss; `shapes` gives each micro-batch's
        activation shape when they differ from the configured one. `on_chunk_backward_done(chunk)`
        is called once per local chunk, right after the chunk's last Backward of the step has run:
        from then on that chunk's gradients for the step are final (e.g. to start their
        data-parallel reduction while the pipeline drains)."""
        self.batches, self.divisor, self.scale = batches, loss_divisor, loss_scale
        self.shapes, self.on_output = shapes or [self.shape] * len(batches), on_output
        self.inputs: dict = {}
        self.outputs: dict = {}
        self.input_grads: dict = {}
        self.pending: dict = {}  # list position -> (work, tensor, post time) of a transfer in flight
        self.deferred: dict = {}  # (mb, chunk) -> weight gradients its Backward queued (zero-bubble)
        self.total = torch.zeros((), device=self.device)
        self.trace = []
        ops, plan = self.plan(len(batches), backward)
        final = last_backwards(ops) if on_chunk_backward_done is not None else {}
        for action in plan:
            if isinstance(action, Post):
                self.post(ops, action.indices)
            elif isinstance(action, Wait):
                self.wait(ops, action.index)
            else:
                self.compute(ops[action.index])
                self.trace.append(action)
                if final.get(ops[action.index].chunk) == action.index:
                    on_chunk_backward_done(ops[action.index].chunk)
        return self.total

    # ---- compute --------------------------------------------------------------------------------
    def compute(self, op) -> None:
        """Run one Forward, Backward or BackwardWeight, timed into the recorder while it records."""
        step = self._steps[type(op)]
        event = FLIGHT.begin(COMPUTE_KIND[type(op)], "", None, op.microbatch, op.chunk)
        if not self.recording:
            step(op)
        else:
            with self.recorder.record(COMPUTE_KIND[type(op)], op.microbatch, op.chunk):
                step(op)
        FLIGHT.end(event)

    def forward(self, op: Forward) -> None:
        mb, chunk = op.microbatch, op.chunk
        x = self.batches[mb][0] if self.is_first(chunk) else self.inputs.pop((mb, chunk))
        grad_enabled = torch.is_grad_enabled()
        deferred = (deferring_weight_grads(self.deferred.setdefault((mb, chunk), []))
                    if self.zero_bubble and grad_enabled else nullcontext())  # weight gradients wait for W
        with self.autocast(), deferred:
            if self.is_last(chunk) and self.on_output is not None:
                self.on_output(mb, self.chunks[chunk](x))
                return
            if self.is_last(chunk):
                out = self.chunks[chunk](x, self.batches[mb][1]).float().mean() / self.divisor
                self.total += out.detach()
            else:
                out = self.chunks[chunk](x)
        if grad_enabled:
            self.outputs[(mb, chunk)] = out
            self.inputs[("saved", mb, chunk)] = x
        else:
            self.outputs[(mb, chunk)] = out.detach()

    def backward(self, op) -> None:
        mb, chunk = op.microbatch, op.chunk
        out = self.outputs.pop((mb, chunk))
        x = self.inputs.pop(("saved", mb, chunk))
        if self.is_last(chunk):
            torch.autograd.backward(out * self.scale)
        else:  # the engine directly: `out` was emptied after sending, only its graph is left
            Variable._execution_engine.run_backward((out,), (self.input_grads.pop(("out", mb, chunk)),),
                                                    False, False, (), True, True)
        if not self.is_first(chunk):
            self.input_grads[("in", mb, chunk)] = x.grad

    def weight(self, op: BackwardWeight) -> None:
        """Zero-bubble schedules: the weight gradients the Backward of (mb, chunk) deferred."""
        flush(self.deferred.pop((op.microbatch, op.chunk)))

    # ---- communication --------------------------------------------------------------------------
    def post(self, ops: list, indices: tuple[int, ...]) -> None:
        """Start the transfers at these list positions together; never waits."""
        p2p, group = [], self.mesh.group("pp")
        # receives first: a rank stuck before its sends shows a send as its innermost open event
        events = [FLIGHT.begin(f"post {_name(ops[i])}", "pp group", self.peer(ops[i]), ops[i].microbatch, ops[i].chunk)
                  for i in sorted(indices, key=lambda i: isinstance(ops[i], SENDS))]
        for i in indices:
            op = ops[i]
            peer = self.peer(op)
            if isinstance(op, SendActivation):
                key = (op.microbatch, op.chunk)  # kept for backward; without it, sent and forgotten
                out = self.outputs[key] if torch.is_grad_enabled() else self.outputs.pop(key)
                p2p.append(dist.P2POp(dist.isend, out.detach().contiguous(), peer, group))
            elif isinstance(op, SendGrad):
                grad = self.input_grads.pop(("in", op.microbatch, op.chunk))
                p2p.append(dist.P2POp(dist.isend, grad.contiguous(), peer, group))
            else:
                buffer = torch.empty(self.shapes[op.microbatch], dtype=self.dtype, device=self.device)
                p2p.append(dist.P2POp(dist.irecv, buffer, peer, group))
        if self.before_send is not None and any(isinstance(ops[i], SENDS) for i in indices):
            self.before_send()
        with watched(group):
            works = self._start(p2p)
        for event in events:
            FLIGHT.end(event)
        posted = self.recorder.now() if self.recording else 0.0
        for i, request, work in zip(indices, p2p, works):
            self.pending[i] = (work, request.tensor, posted)  # the tensor lives until the transfer is done
        if torch.is_grad_enabled():
            self._release_sent([ops[i] for i in indices])
        self.trace.append(Post(indices))

    def peer(self, op) -> int:
        """The global rank at the other end of a send or receive."""
        return self.mesh.stage_rank(op.to_stage if isinstance(op, SENDS) else op.from_stage)

    def _start(self, p2p: list) -> list:
        """One work per op. Batched exchanges go out as one batch_isend_irecv (a send and the receive
        it pairs with must start together); overlapped posts never pair, so each op starts on its own,
        which on gloo skips the coalescing round (measured: ~70 us less per post, ~45% of a receive's)."""
        if self.contract == "batched":
            works = dist.batch_isend_irecv(p2p)
            return works if len(works) == len(p2p) else works * len(p2p)  # NCCL: one work for the batch
        return [request.op(request.tensor, request.peer, request.group, request.tag) for request in p2p]

    def wait(self, ops: list, i: int) -> None:
        """Block until transfer i is done; a received tensor goes where its consumer looks for it."""
        work, tensor, posted = self.pending.pop(i)
        op = ops[i]
        begin = self.recorder.now() if self.recording else 0.0
        event = FLIGHT.begin(f"wait {_name(op)}", "pp group", self.peer(op), op.microbatch, op.chunk)
        with watched(self.mesh.group("pp")):  # the pp group's timeout bounds the wait
            work.wait()
        FLIGHT.end(event)
        if self.recording:
            end = self.recorder.now()
            self.recorder.add("comm", op.microbatch, op.chunk, begin, end)
            self.recorder.add("send" if isinstance(op, SENDS) else "recv",
                              op.microbatch, op.chunk, posted, end)
        if isinstance(op, RecvActivation):
            self.inputs[(op.microbatch, op.chunk)] = tensor.requires_grad_(torch.is_grad_enabled())
        elif isinstance(op, RecvGrad):
            self.input_grads[("out", op.microbatch, op.chunk)] = tensor
        self.trace.append(Wait(i))

    def _release_sent(self, ops: list) -> None:
        """Free the data of outputs just posted (Megatron's output deallocation): the send holds their
        storage until it is done, and backward needs only their autograd graph, not their values."""
        for op in ops:
            if isinstance(op, SendActivation):
                out = self.outputs[(op.microbatch, op.chunk)]
                out.data = torch.empty((1,), dtype=out.dtype, device=out.device)


def _name(op) -> str:
    """SendActivation -> send_activation: an instruction's name in flight-recorder events."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in type(op).__name__).lstrip("_")
