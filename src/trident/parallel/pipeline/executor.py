"""Runs a pipeline schedule (schedules.py) on real ranks with point-to-point messages.

Needs pp >= 2 (every chunk's neighbours live on other ranks). Each maximal run of Send*/Recv*
instructions is posted as one `batch_isend_irecv` and waited for, the contract the schedules are
built and checked against. Activation shapes are known to every stage (fixed by the config,
[s or s/tp, micro_batch, hidden], or given per micro-batch for evaluation), so no shape handshake
is needed. An output sent to the next stage keeps only its autograd graph (its data is freed once
sent, as Megatron's output deallocation); a micro-batch's activations are dropped as soon as its
backward has run, or, without backward, as soon as they are sent.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.autograd import Variable

from trident.parallel.pipeline.schedules import (COMMUNICATION, Forward, RecvActivation, SendActivation, SendGrad,
                                                 build_schedule, forward_only)
from trident.parallel.pipeline.timeline import TimelineRecorder
from trident.parallel.watch import watched


class PipelineExecutor:
    """Forward/backward of one step's micro-batches through this rank's model chunks. With a
    `recorder`, every compute instruction of a run is timed into it while it is recording."""

    def __init__(self, chunks: list, mesh, schedule: str, activation_shape: tuple[int, ...],
                 dtype: torch.dtype, device: torch.device, autocast=nullcontext,
                 recorder: TimelineRecorder | None = None):
        self.chunks, self.mesh, self.schedule_name = chunks, mesh, schedule
        self.v = len(chunks)
        self.shape, self.dtype, self.device, self.autocast = activation_shape, dtype, device, autocast
        self.recorder = recorder
        self._schedules: dict[tuple[int, bool], list] = {}

    def schedule(self, num_microbatches: int, backward: bool) -> list:
        key = (num_microbatches, backward)
        if key not in self._schedules:
            full = build_schedule(self.schedule_name, self.mesh.pp, num_microbatches, self.v)
            self._schedules[key] = (full if backward else forward_only(full))[self.mesh.pp_rank]
        return self._schedules[key]

    def is_first(self, chunk: int) -> bool:
        return self.mesh.pp_rank == 0 and chunk == 0

    def is_last(self, chunk: int) -> bool:
        return self.mesh.is_last_stage and chunk == self.v - 1

    def run(self, batches: list, loss_divisor: int, loss_scale: float = 1.0, backward: bool = True,
            shapes: list[tuple[int, ...]] | None = None, on_output=None) -> torch.Tensor:
        """Sum over micro-batches of mean token loss / loss_divisor (non-zero on the last stage only).
        Forward only, with `on_output`: the last stage hands each micro-batch's output (logits) to
        on_output(index, output) instead of computing a loss; `shapes` gives each micro-batch's
        activation shape when they differ from the configured one."""
        self.batches, self.divisor, self.scale = batches, loss_divisor, loss_scale
        self.shapes, self.on_output = shapes or [self.shape] * len(batches), on_output
        self.inputs: dict = {}
        self.outputs: dict = {}
        self.input_grads: dict = {}
        self.total = torch.zeros((), device=self.device)
        ops = self.schedule(len(batches), backward)
        index = 0
        while index < len(ops):
            if isinstance(ops[index], COMMUNICATION):
                end = index
                while end < len(ops) and isinstance(ops[end], COMMUNICATION):
                    end += 1
                self.exchange(ops[index:end])
                index = end
                continue
            self.compute(ops[index])
            index += 1
        return self.total

    # ---- compute --------------------------------------------------------------------------------
    def compute(self, op) -> None:
        """Run one Forward or Backward, timed into the recorder while it records."""
        step = self.forward if isinstance(op, Forward) else self.backward
        if self.recorder is None or not self.recorder.recording:
            step(op)
            return
        with self.recorder.record("forward" if isinstance(op, Forward) else "backward", op.microbatch, op.chunk):
            step(op)

    def forward(self, op: Forward) -> None:
        mb, chunk = op.microbatch, op.chunk
        x = self.batches[mb][0] if self.is_first(chunk) else self.inputs.pop((mb, chunk))
        grad_enabled = torch.is_grad_enabled()
        with self.autocast():
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

    def _release_sent(self, ops: list) -> None:
        """Free the data of outputs just sent (Megatron's output deallocation): the next stage holds
        them now, and backward needs only their autograd graph, not their values."""
        for op in ops:
            if isinstance(op, SendActivation):
                out = self.outputs[(op.microbatch, op.chunk)]
                out.data = torch.empty((1,), dtype=out.dtype, device=out.device)

    # ---- communication --------------------------------------------------------------------------
    def exchange(self, ops: list) -> None:
        p2p, received, group = [], [], self.mesh.group("pp")  # the pp group's timeout bounds the wait
        for op in ops:
            peer = self.mesh.stage_rank(op.to_stage if isinstance(op, (SendActivation, SendGrad)) else op.from_stage)
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
                received.append((op, buffer))
        with watched(group):
            for request in dist.batch_isend_irecv(p2p):
                request.wait()
        if torch.is_grad_enabled():
            self._release_sent(ops)
        for op, buffer in received:
            if isinstance(op, RecvActivation):
                self.inputs[(op.microbatch, op.chunk)] = buffer.requires_grad_(torch.is_grad_enabled())
            else:
                self.input_grads[("out", op.microbatch, op.chunk)] = buffer
