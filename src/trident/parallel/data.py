"""Data parallelism: parameters and fp32 gradients in flat contiguous buffers, cut into buckets that
are reduced across DP ranks with one collective each, and sharded over DP by ZeRO stage.

Parameters are laid out in reverse order (the order backward finishes them), so with
`overlap=True` a bucket's reduction starts, asynchronously, as soon as every gradient in it is
final. A gradient is final after its last accumulation of the step: `expect_accumulations(m)` says
that each parameter receives one per micro-batch (m in all), so the hooks count them. With pipeline
stages this starts a chunk's buckets during that chunk's last backward, while the pipeline drains,
and with interleaved schedules each chunk's buckets start when that chunk is done. Parameters named
`alone` (the tied embedding, whose two stage copies are summed after the DP reduction) get a bucket of
their own, so that their owned slices line up on both stages. Each bucket is padded to a multiple of
dp; DP rank r owns the r-th 1/dp of every bucket. What a rank keeps, by `stage` (ZeRO, in effect):
  0  full parameters and full fp32 gradients; each bucket is all-reduced (every rank owns all of it);
  1  the same buffers; each bucket is reduce-scattered into the owned slice and the updated
     parameters are all-gathered after the step (the optimizer state is sharded: zero.py);
  2  full parameters, but only the owned slice of the fp32 gradients: each micro-batch's gradient of
     a bucket is staged in a temporary fp32 buffer and reduce-scattered into the owned slice as soon
     as every parameter of the bucket has added to it (at most MAX_IN_FLIGHT buckets in flight);
  3  as 2, and only the owned slice of the parameters too: a bucket's full parameters exist only
     between `gather` and `release` (param_gather.py decides when); outside, each parameter is a
     one-element placeholder of its shape.
Under hybrid sharding (hybrid.py) `dp_group` is a shard group of K DP ranks, and the owned gradient
slices are then all-reduced across the `replicas` of this rank's shards once a step (`reduce`).
The reductions are the same collectives on the same data whether they overlap the backward or not,
so both give bit-identical results. `sent_bytes` counts this rank's DP traffic since zero_grad.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from trident.parallel.hybrid import NO_REPLICAS, Replicas
from trident.parallel.layout_rules import REDUCTIONS_IN_FLIGHT as MAX_IN_FLIGHT
from trident.parallel.watch import watched


@dataclass
class Bucket:
    start: int  # flat offset of the bucket
    end: int  # exclusive, padded to a multiple of dp
    params: list  # parameters inside
    index: int = 0  # its place in GradBuffers.buckets
    shard_start: int = 0  # where its owned slice sits in the compact (owned-only) buffers of stages 2 and 3
    ready: int = 0  # parameters whose gradient is final this step
    handle: object = None
    scattered: torch.Tensor | None = None  # reduce-scatter output, copied into place on completion
    launched_at: float | None = None  # seconds on the timeline recorder's clock, while it records
    staging: torch.Tensor | None = None  # stage >= 2: gradients added since the last reduce-scatter
    fresh: set = field(default_factory=set)  # stage >= 2: ids of the parameters added to `staging`
    full: torch.Tensor | None = None  # stage 3: the gathered parameters, while in use
    gathering: tuple | None = None  # stage 3: (output, work) of an all-gather in flight

    def owned(self, dp_rank: int, dp: int, shard: bool) -> tuple[int, int]:
        if not shard:
            return self.start, self.end
        size = (self.end - self.start) // dp
        return self.start + dp_rank * size, self.start + (dp_rank + 1) * size


class GradBuffers:
    """Flat parameter buffer (model dtype) and fp32 gradient buffer with DP bucket reduction, each
    whole or only this rank's owned slices, by ZeRO `stage`."""

    def __init__(self, named_params: list, dp_group, dp: int, dp_rank: int, bucket_bytes: int,
                 stage: int = 0, overlap: bool = False, timeout_s: float = 600.0, alone=(), unit_of=None,
                 replicas: Replicas = NO_REPLICAS):
        self.named_params = list(reversed(named_params))
        self.replicas = replicas  # hybrid sharding: copies of this rank's shards, summed once a step
        self.alone = {id(param) for param in alone}
        self.group, self.dp, self.dp_rank, self.stage, self.overlap = dp_group, dp, dp_rank, stage, overlap
        self.shard = stage >= 1
        self.timeout = timedelta(seconds=timeout_s)  # an explicit bound: a hung peer must not hang us
        self.offsets: dict[int, int] = {}  # id(param) -> flat offset
        self.shapes = {id(param): param.shape for _, param in self.named_params}
        self.buckets: list[Bucket] = []
        position = self._cut_buckets(bucket_bytes, unit_of or {})
        first = self.named_params[0][1] if self.named_params else torch.empty(0)
        shard_size = self._place_shards()
        self.params = torch.zeros(shard_size if stage == 3 else position, dtype=first.dtype, device=first.device)
        self.grads = torch.zeros(shard_size if stage >= 2 else position, dtype=torch.float32, device=first.device)
        self.placeholder = torch.zeros(1, dtype=first.dtype, device=first.device)  # stage 3: released parameters
        self.bucket_of = {id(param): bucket for bucket in self.buckets for param in bucket.params}
        for _, param in self.named_params:
            self._adopt(param)
        self.owned_param_views = [self._owned(self.params, b, self.stage == 3) for b in self.buckets]
        self.owned_grad_views = [self._owned(self.grads, b, self.stage >= 2) for b in self.buckets]
        self.accumulations = {id(param): 0 for _, param in self.named_params}
        self.expected = 0  # accumulations that make a gradient final this step (0: not known)
        self.in_flight: list[tuple] = []  # stage >= 2: (bucket, staging, output, work, launched_at)
        self.on_released = None  # stage 3: releases a bucket no longer needed (param_gather's, which forgets it too)
        self.recorder = None  # a TimelineRecorder: reductions are timed into it while it records
        self.sent_bytes = 0

    def _cut_buckets(self, bucket_bytes: int, unit_of: dict) -> int:
        """Flat offsets and buckets of at least `bucket_bytes` of fp32 gradient (an `alone` parameter
        in its own; with `unit_of`, by id(param), a bucket never spans two units); returns the padded
        total size."""
        position, bucket_params, bucket_start, unit = 0, [], 0, None
        for _, param in self.named_params:
            alone = id(param) in self.alone
            if bucket_params and (alone or unit_of.get(id(param)) != unit):
                position = self._close_bucket(bucket_start, position, bucket_params)
                bucket_start, bucket_params = position, []
            unit = unit_of.get(id(param))
            self.offsets[id(param)] = position
            position += param.numel()
            bucket_params.append(param)
            if alone or (position - bucket_start) * 4 >= bucket_bytes:
                position = self._close_bucket(bucket_start, position, bucket_params)
                bucket_start, bucket_params = position, []
        if bucket_params:
            position = self._close_bucket(bucket_start, position, bucket_params)
        return position

    def _close_bucket(self, start: int, end: int, params: list) -> int:
        padded = start + -(-(end - start) // self.dp) * self.dp
        self.buckets.append(Bucket(start, padded, list(params), len(self.buckets)))
        return padded

    def _place_shards(self) -> int:
        """Each bucket's place in the compact buffers that hold owned slices only; their total size."""
        size = 0
        for bucket in self.buckets:
            bucket.shard_start = size
            size += (bucket.end - bucket.start) // self.dp
        return size

    def _owned(self, tensor: torch.Tensor, bucket: Bucket, compact: bool) -> torch.Tensor:
        lo, hi = bucket.owned(self.dp_rank, self.dp, self.shard)
        return tensor[bucket.shard_start:bucket.shard_start + hi - lo] if compact else tensor[lo:hi]

    def _adopt(self, param) -> None:
        """The parameter's values move into the flat buffer (its owned slice only, at stage 3)."""
        start, end = self.param_range(param)
        if self.stage == 3:
            a, b = self.owned_slice(param)
            self.owned_view(self.params, param, compact=True).copy_(param.data.reshape(-1)[a:b])
            self._release_param(param)
        else:
            view = self.params[start:end].view_as(param)
            view.copy_(param.data)
            param.data = view  # the model now trains on the flat buffer
        if self.stage <= 1:
            param.main_grad = self.grads[start:end].view_as(param)
        param.register_post_accumulate_grad_hook(self._accumulate)

    # ---- owned slices ---------------------------------------------------------------------------
    def owned_ranges(self) -> list[tuple[int, int]]:
        return [b.owned(self.dp_rank, self.dp, self.shard) for b in self.buckets]

    def owned_slice(self, param) -> tuple[int, int]:
        """[a, b) of the parameter's flattened tensor that lies in this rank's owned range (a == b: none)."""
        start, end = self.param_range(param)
        lo, hi = self.bucket_of[id(param)].owned(self.dp_rank, self.dp, self.shard)
        a, b = max(start, lo) - start, min(end, hi) - start
        return (a, b) if a < b else (0, 0)

    def owned_view(self, tensor: torch.Tensor, param, compact: bool) -> torch.Tensor:
        """The owned part of `param` in the flat `tensor` (self.params or self.grads), 1-D."""
        a, b = self.owned_slice(param)
        start = self.offsets[id(param)]
        if not compact:
            return tensor[start + a:start + b]
        bucket = self.bucket_of[id(param)]
        lo, _ = bucket.owned(self.dp_rank, self.dp, self.shard)
        at = bucket.shard_start + start + a - lo
        return tensor[at:at + b - a]

    def owned_grad(self, param) -> torch.Tensor:
        """The owned part of the parameter's reduced gradient (all of it without ZeRO), 1-D."""
        return self.owned_view(self.grads, param, compact=self.stage >= 2)

    def owned_param(self, param) -> torch.Tensor:
        """The owned part of the parameter's values, 1-D: what this rank updates and saves."""
        return self.owned_view(self.params, param, compact=self.stage == 3)

    def param_range(self, param) -> tuple[int, int]:
        start = self.offsets[id(param)]
        return start, start + param.numel()

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
        share = nbytes * (self.dp - 1) // self.dp
        self.sent_bytes += 2 * share if collective == "all_reduce" else share

    def _launch(self, bucket: Bucket, async_op: bool) -> None:
        if self.group is None:
            return
        if self.recorder is not None and self.recorder.recording:
            bucket.launched_at = self.recorder.now()
        data = self.grads[bucket.start:bucket.end]
        self._count(data.numel() * 4, "reduce_scatter" if self.shard else "all_reduce")
        if self.shard:
            lo, hi = bucket.owned(self.dp_rank, self.dp, True)
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
        output = torch.empty(staging.numel() // self.dp, dtype=torch.float32, device=staging.device)
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
        with watched(self.group, f"wait gradient bucket {index}"):
            work.wait(self.timeout)
        self.owned_grad_views[index].add_(output)
        if launched is not None and self.recorder.recording:
            self.recorder.add("reduce", index, 0, launched, self.recorder.now())

    def reduce(self) -> None:
        """Finish the DP reduction of every bucket (those not started during backward start now)."""
        if self.stage >= 2:
            for bucket in self.buckets:
                if bucket.staging is not None:
                    self._scatter(bucket)
            while self.in_flight:
                self._settle()
            self._reduce_replicas()
            self.release_all()
            self.expected = 0
            return
        for bucket in self.buckets:
            if bucket.handle is None:
                self._launch(bucket, async_op=True)
        for index, bucket in enumerate(self.buckets):
            if bucket.handle is not None:
                with watched(self.group, f"wait gradient bucket {index}"):
                    bucket.handle.wait(self.timeout)
            if bucket.scattered is not None:
                lo, hi = bucket.owned(self.dp_rank, self.dp, True)
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

    def gather_params(self) -> None:
        """After a ZeRO-1 or -2 step: every DP rank's updated slice to every rank (all-gather per
        bucket). At stage 3 nothing is gathered here: each bucket is gathered when it is next used."""
        if not self.shard or self.stage == 3 or self.group is None:
            return
        pending = []  # all buckets in flight at once: one wait for the slowest, not one per bucket
        for bucket in self.buckets:
            lo, hi = bucket.owned(self.dp_rank, self.dp, True)
            mine = self.params[lo:hi].clone()  # the output overlaps it; kept alive until the wait
            self._count((bucket.end - bucket.start) * self.params.element_size(), "all_gather")
            pending.append((mine, dist.all_gather_into_tensor(self.params[bucket.start:bucket.end], mine,
                                                              group=self.group, async_op=True)))
        for _, handle in pending:
            with watched(self.group, "wait parameter all_gather"):
                handle.wait(self.timeout)

    # ---- stage 3: a bucket's full parameters, while in use --------------------------------------
    def gather(self, bucket: Bucket, wait: bool = True) -> None:
        """Start the bucket's all-gather unless it is gathered or under way; with `wait`, finish it and
        point its parameters at the gathered values."""
        if bucket.full is not None:
            return
        if bucket.gathering is None:
            output = torch.empty(bucket.end - bucket.start, dtype=self.params.dtype, device=self.params.device)
            self._count(output.numel() * output.element_size(), "all_gather")
            mine = self.owned_param_views[bucket.index]
            if self.group is None:  # hybrid sharding over groups of one: nothing to gather
                bucket.gathering = (output.copy_(mine), None)
            else:
                bucket.gathering = (output, dist.all_gather_into_tensor(output, mine, group=self.group, async_op=True))
        if not wait:
            return
        output, work = bucket.gathering
        if work is not None:
            with watched(self.group, "wait parameter all_gather"):
                work.wait(self.timeout)
        bucket.gathering, bucket.full = None, output
        for param in bucket.params:
            start = self.offsets[id(param)] - bucket.start
            param.data = output[start:start + param.numel()].view(self.shapes[id(param)])

    def release(self, bucket: Bucket) -> None:
        """Drop the bucket's gathered parameters (what autograd saved of them is rebuilt on regather)."""
        if bucket.full is None:
            return
        bucket.full = None
        for param in bucket.params:
            self._release_param(param)

    def _release_param(self, param) -> None:
        param.data = self.placeholder.expand(self.shapes[id(param)])  # its shape, one element of memory

    def release_all(self) -> None:
        """Stage 3, after the backward: nothing stays gathered (an all-gather still under way is finished)."""
        if self.stage != 3:
            return
        for bucket in self.buckets:
            if bucket.gathering is not None:
                self.gather(bucket)
            (self.on_released or self.release)(bucket)


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
