"""Data parallelism's gradients: fp32, in one flat buffer over flat_layout.py's layout (whole, or this
rank's owned slices only), cut into buckets that are reduced across the gradient group (dp x cp
ranks, mesh.gradient) with one collective each, and sharded by ZeRO stage. The weights live in
param_buffers.py; `flat_buffers` builds both.

With `overlap=True` a bucket's reduction starts, asynchronously, as soon as every gradient in it is
final. A gradient is final after its last accumulation of the step: `expect_accumulations(m)` says
that each parameter receives one per micro-batch (m in all), so the hooks count them. With pipeline
stages this starts a chunk's buckets during that chunk's last backward, while the pipeline drains,
and with interleaved schedules each chunk's buckets start when that chunk is done. Parameters named
`alone` (the tied embedding, whose two stage copies are summed after the gradient reduction) get a bucket of
their own, so that their owned slices line up on both stages. Member r of the layout's group (size
G) owns the r-th 1/G of every bucket. What a rank keeps, by `stage` (ZeRO, in effect):
  0  full parameters and full fp32 gradients; each bucket is all-reduced (every rank owns all of it);
  1  the same buffers; each bucket is reduce-scattered into the owned slice and the updated
     parameters are all-gathered after the step (param_buffers.py; the optimizer state is sharded: zero.py);
  2  full parameters, but only the owned slice of the fp32 gradients: each micro-batch's gradient of
     a bucket is staged in a temporary fp32 buffer and reduce-scattered into the owned slice as soon
     as every parameter of the bucket has added to it (at most MAX_IN_FLIGHT buckets in flight);
  3  as 2, and only the owned slice of the parameters too (param_buffers.py): once a bucket's
     gradients are staged, `on_released` (param_gather.py's) drops its gathered weights.
Under hybrid sharding (hybrid.py) the layout's group is a shard group of K of those ranks, and the owned
gradient slices are then all-reduced across the `replicas` of this rank's shards once a step (`reduce`).
The reductions are the same collectives on the same data whether they overlap the backward or not,
so both give bit-identical results. `sent_bytes` counts this rank's gradient traffic since zero_grad.
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from trident.parallel.flat_layout import Bucket, FlatLayout, ring_bytes
from trident.parallel.hybrid import NO_REPLICAS, Replicas
from trident.parallel.layout_rules import REDUCTIONS_IN_FLIGHT as MAX_IN_FLIGHT
from trident.parallel.param_buffers import ParamBuffers
from trident.parallel.watch import watched


def flat_buffers(named_params: list, group, size: int, rank: int, bucket_bytes: int, stage: int = 0,
                 overlap: bool = False, timeout_s: float = 600.0, alone=(), unit_of=None,
                 replicas: Replicas = NO_REPLICAS) -> tuple[ParamBuffers, "GradBuffers"]:
    """The weights and fp32 gradients of `named_params` in flat buffers bucketed over `group` (`size`
    members, this rank the `rank`-th; `alone` parameters in buckets of their own; never across two
    units of `unit_of`), sharded by ZeRO `stage`."""
    layout = FlatLayout(named_params, group, size, rank, bucket_bytes, stage >= 1, alone, unit_of, replicas)
    return ParamBuffers(layout, stage, timeout_s), GradBuffers(layout, stage, overlap, timeout_s)


class GradBuffers:
    """The fp32 gradients of `layout`'s parameters, whole or only this rank's owned slices (ZeRO
    `stage` >= 2), and their reduction across the layout's group."""

    def __init__(self, layout: FlatLayout, stage: int = 0, overlap: bool = False, timeout_s: float = 600.0):
        self.layout, self.stage, self.overlap = layout, stage, overlap
        self.group, self.size, self.shard, self.replicas = layout.group, layout.size, layout.shard, layout.replicas
        self.buckets, self.bucket_of, self.offsets = layout.buckets, layout.bucket_of, layout.offsets
        self.timeout = timedelta(seconds=timeout_s)  # on the CPU, a bound on the host's wait (watched.wait)
        first = layout.named_params[0][1] if layout.named_params else torch.empty(0)
        self.grads = torch.zeros(layout.compact_total if stage >= 2 else layout.total, dtype=torch.float32,
                                 device=first.device)
        for _, param in layout.named_params:
            if stage <= 1:
                start, end = layout.param_range(param)
                param.main_grad = self.grads[start:end].view_as(param)
            param.register_post_accumulate_grad_hook(self._accumulate)
        self.owned_grad_views = [layout.owned_part(self.grads, b, stage >= 2) for b in self.buckets]
        self.accumulations = {id(param): 0 for _, param in layout.named_params}
        self.expected = 0  # accumulations that make a gradient final this step (0: not known)
        self.in_flight: list[tuple] = []  # stage >= 2: (bucket, staging, output, work, launched_at)
        self.on_released = None  # stage 3: drops a bucket's gathered weights once its gradients are staged
        self.recorder = None  # a TimelineRecorder: reductions are timed into it while it records
        self.sent_bytes = 0

    def owned_grad(self, param) -> torch.Tensor:
        """The owned part of the parameter's reduced gradient (all of it without ZeRO), 1-D."""
        return self.layout.owned_view(self.grads, param, compact=self.stage >= 2)

    # ---- accumulation ---------------------------------------------------------------------------
    def expect_accumulations(self, count: int) -> None:
        """Each parameter's gradient is final after its `count`-th accumulation of this step (one
        per micro-batch); with overlap, a bucket's reduction starts once all of its are final."""
        self.expected = count

    def _accumulate(self, param) -> None:
        """fp32 accumulation across micro-batches; the low-precision .grad is dropped at once."""
        if self.stage >= 2:
            self._stage_gradient(param)
            return
        if not self.overlap:
            param.main_grad.add_(param.grad)
            param.grad = None
            return
        bucket = self.bucket_of[id(param)]
        if bucket.handle is not None:  # never silently change data a collective is reading
            raise RuntimeError(f"a gradient ({tuple(param.shape)}) was accumulated after its bucket's data-parallel "
                               "reduction started: expect_accumulations() was given too few micro-batches")
        param.main_grad.add_(param.grad)
        param.grad = None
        self.accumulations[id(param)] += 1
        if self.accumulations[id(param)] == self.expected:
            bucket.ready += 1
            if bucket.ready == len(bucket.params):
                self._launch(bucket, async_op=True)

    def _stage_gradient(self, param) -> None:
        """Stages 2 and 3: add to the bucket's staging buffer; reduce-scatter it once every parameter
        of the bucket has added to it (and, at stage 3, release its gathered parameters)."""
        bucket = self.bucket_of[id(param)]
        if bucket.staging is None:
            bucket.staging = torch.zeros(bucket.end - bucket.start, dtype=torch.float32, device=self.grads.device)
        start = self.offsets[id(param)] - bucket.start
        bucket.staging[start:start + param.numel()].view_as(param.grad).add_(param.grad)
        param.grad = None
        bucket.fresh.add(id(param))
        if len(bucket.fresh) == len(bucket.params):
            self._scatter(bucket)
            if self.on_released is not None:  # every parameter's backward has run: its values are not needed
                self.on_released(bucket)

    def zero_grad(self) -> None:
        self.grads.zero_()
        self.expected = 0
        self.sent_bytes = 0
        for key in self.accumulations:
            self.accumulations[key] = 0
        for bucket in self.buckets:
            bucket.ready, bucket.handle, bucket.launched_at, bucket.staging, bucket.fresh = 0, None, None, None, set()

    # ---- reduction ------------------------------------------------------------------------------
    def _count(self, nbytes: int, collective: str) -> None:
        """This rank's bytes sent by a ring collective over `nbytes` (the full buffer's size)."""
        self.sent_bytes += ring_bytes(nbytes, self.size, collective)

    def _launch(self, bucket: Bucket, async_op: bool) -> None:
        if self.group is None:
            return
        if self.recorder is not None and self.recorder.recording:
            bucket.launched_at = self.recorder.now()
        data = self.grads[bucket.start:bucket.end]
        self._count(data.numel() * 4, "reduce_scatter" if self.shard else "all_reduce")
        if self.shard:
            lo, hi = self.layout.owned(bucket)
            bucket.scattered = torch.empty(hi - lo, dtype=data.dtype, device=data.device)  # no aliasing of input
            bucket.handle = dist.reduce_scatter_tensor(bucket.scattered, data, group=self.group, async_op=async_op)
        else:
            bucket.handle = dist.all_reduce(data, group=self.group, async_op=async_op)

    def _scatter(self, bucket: Bucket) -> None:
        """Stages 2 and 3: reduce-scatter the bucket's staged gradient into its owned slice."""
        staging, bucket.staging, bucket.fresh = bucket.staging, None, set()
        if self.group is None:  # one replica: the staged gradient is the reduced one
            self.owned_grad_views[bucket.index].add_(staging)
            return
        output = torch.empty(staging.numel() // self.size, dtype=torch.float32, device=staging.device)
        self._count(staging.numel() * 4, "reduce_scatter")
        launched = self.recorder.now() if self.recorder is not None and self.recorder.recording else None
        work = dist.reduce_scatter_tensor(output, staging, group=self.group, async_op=True)
        self.in_flight.append((bucket, staging, output, work, launched))
        while len(self.in_flight) > (MAX_IN_FLIGHT if self.overlap else 0):
            self._settle()

    def _settle(self) -> None:
        """Wait for the oldest reduce-scatter in flight and add its result to the owned gradient."""
        bucket, _, output, work, launched = self.in_flight.pop(0)
        index = bucket.index
        with watched(self.group, f"wait gradient bucket {index}") as watch:
            watch.wait(work, self.timeout, output.is_cuda)
        self.owned_grad_views[index].add_(output)
        if launched is not None and self.recorder.recording:
            self.recorder.add("reduce", index, 0, launched, self.recorder.now())

    def reduce(self) -> None:
        """Finish the gradient reduction of every bucket (those not started during backward start now)."""
        if self.stage >= 2:
            for bucket in self.buckets:
                if bucket.staging is not None:
                    self._scatter(bucket)
            while self.in_flight:
                self._settle()
            self._reduce_replicas()
            if self.on_released is not None:  # stage 3: nothing stays gathered after the backward
                for bucket in self.buckets:
                    self.on_released(bucket)
            self.expected = 0
            return
        for bucket in self.buckets:
            if bucket.handle is None:
                self._launch(bucket, async_op=True)
        for index, bucket in enumerate(self.buckets):
            if bucket.handle is not None:
                with watched(self.group, f"wait gradient bucket {index}") as watch:
                    watch.wait(bucket.handle, self.timeout, self.grads.is_cuda)
            if bucket.scattered is not None:
                lo, hi = self.layout.owned(bucket)
                self.grads[lo:hi].copy_(bucket.scattered)
                bucket.scattered = None
            if bucket.launched_at is not None and self.recorder.recording:
                self.recorder.add("reduce", index, 0, bucket.launched_at, self.recorder.now())
        self._reduce_replicas()
        self.expected = 0

    def _reduce_replicas(self) -> None:
        """Hybrid sharding: the owned gradient slices summed across the replicas of this rank's shards
        (one all-reduce; the shard group's reduce-scatter summed only its own members)."""
        group, count = self.replicas.group, self.replicas.count
        if group is None or not self.shard:
            return
        self.sent_bytes += 2 * sum(view.numel() for view in self.owned_grad_views) * 4 * (count - 1) // count
        if self.stage == 1:
            all_reduce_coalesced(self.owned_grad_views, group)
            return
        with watched(group, "all_reduce gradient replicas"):  # stages 2-3: grads holds the owned slices only
            dist.all_reduce(self.grads, group=group)


def all_reduce_coalesced(tensors: list[torch.Tensor], group, op=dist.ReduceOp.SUM) -> None:
    """Sum (by default) a few tensors in place across `group` with one collective."""
    tensors = [tensor for tensor in tensors if tensor.numel()]
    if group is None or not tensors:
        return
    flat = _flatten_dense_tensors(tensors)
    with watched(group, "all_reduce"):
        dist.all_reduce(flat, op=op, group=group)
    for tensor, reduced in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
        tensor.copy_(reduced)
