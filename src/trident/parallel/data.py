"""Data parallelism: parameters and fp32 gradients in flat contiguous buffers, cut into buckets that
are reduced across DP ranks with one collective each.

Parameters are laid out in reverse order (the order backward finishes them), so with
`overlap=True` a bucket's reduction starts, asynchronously, as soon as every gradient in it is
final. A gradient is final after its last accumulation of the step: `expect_accumulations(m)` says
that each parameter receives one per micro-batch (m in all), so the hooks count them. With pipeline
stages this starts a chunk's buckets during that chunk's last backward, while the pipeline drains,
and with interleaved schedules each chunk's buckets start when that chunk is done. Parameters named
in `deferred` (the tied embedding, summed across two stages first) wait for `reduce()`. Each bucket is
padded to a multiple of dp so that with ZeRO-1 (`shard=True`) a reduce-scatter leaves DP rank r the
r-th 1/dp of every bucket: the part of the model whose optimizer state it owns. Without ZeRO every
rank owns everything (all-reduce). The reductions are the same collectives on the same data whether
they overlap the backward or not, so both give bit-identical results.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from trident.parallel.watch import watched


@dataclass
class Bucket:
    start: int  # flat offset of the bucket
    end: int  # exclusive, padded to a multiple of dp
    params: list  # parameters inside
    ready: int = 0  # parameters whose gradient is final this step
    handle: object = None
    scattered: torch.Tensor | None = None  # reduce-scatter output, copied into place on completion
    launched_at: float | None = None  # seconds on the timeline recorder's clock, while it records

    def owned(self, dp_rank: int, dp: int, shard: bool) -> tuple[int, int]:
        if not shard:
            return self.start, self.end
        size = (self.end - self.start) // dp
        return self.start + dp_rank * size, self.start + (dp_rank + 1) * size


class GradBuffers:
    """Flat parameter buffer (model dtype) and fp32 gradient buffer with DP bucket reduction."""

    def __init__(self, named_params: list, dp_group, dp: int, dp_rank: int, bucket_bytes: int,
                 shard: bool = False, overlap: bool = False, timeout_s: float = 600.0, deferred=()):
        self.named_params = list(reversed(named_params))
        self.deferred = {id(param) for param in deferred}  # final only once reduce() is called
        self.group, self.dp, self.dp_rank, self.shard, self.overlap = dp_group, dp, dp_rank, shard, overlap
        self.timeout = timedelta(seconds=timeout_s)  # an explicit bound: a hung peer must not hang us
        self.offsets: dict[int, int] = {}  # id(param) -> flat offset
        self.buckets: list[Bucket] = []
        position = self._cut_buckets(bucket_bytes)
        first = self.named_params[0][1] if self.named_params else torch.empty(0)
        self.params = torch.zeros(position, dtype=first.dtype, device=first.device)
        self.grads = torch.zeros(position, dtype=torch.float32, device=first.device)
        self.bucket_of: dict[int, Bucket] = {}
        for bucket in self.buckets:
            for param in bucket.params:
                self.bucket_of[id(param)] = bucket
        for _, param in self.named_params:
            start = self.offsets[id(param)]
            view = self.params[start:start + param.numel()].view_as(param)
            view.copy_(param.data)
            param.data = view  # the model now trains on the flat buffer
            param.main_grad = self.grads[start:start + param.numel()].view_as(param)
            param.register_post_accumulate_grad_hook(self._accumulate)
        self.accumulations = {id(param): 0 for _, param in self.named_params}
        self.expected = 0  # accumulations that make a gradient final this step (0: not known)
        self.recorder = None  # a TimelineRecorder: reductions are timed into it while it records

    def _cut_buckets(self, bucket_bytes: int) -> int:
        """Flat offsets and buckets of at least `bucket_bytes` of fp32 gradient (a deferred parameter
        alone in its own, so it holds back no other); returns the padded total size."""
        position, bucket_params, bucket_start = 0, [], 0
        for _, param in self.named_params:
            alone = id(param) in self.deferred
            if alone and bucket_params:
                position = self._close_bucket(bucket_start, position, bucket_params)
                bucket_start, bucket_params = position, []
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
        self.buckets.append(Bucket(start, padded, list(params)))
        return padded

    def owned_ranges(self) -> list[tuple[int, int]]:
        return [b.owned(self.dp_rank, self.dp, self.shard) for b in self.buckets]

    def expect_accumulations(self, count: int) -> None:
        """Each parameter's gradient is final after its `count`-th accumulation of this step (one
        per micro-batch); with overlap, a bucket's reduction starts once all of its are final."""
        self.expected = count

    def _accumulate(self, param) -> None:
        """fp32 accumulation across micro-batches; the low-precision .grad is dropped at once."""
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
        if self.accumulations[id(param)] == self.expected and id(param) not in self.deferred:
            bucket.ready += 1
            if bucket.ready == len(bucket.params):
                self._launch(bucket, async_op=True)

    def zero_grad(self) -> None:
        self.grads.zero_()
        self.expected = 0
        for key in self.accumulations:
            self.accumulations[key] = 0
        for bucket in self.buckets:
            bucket.ready, bucket.handle, bucket.launched_at = 0, None, None

    def _launch(self, bucket: Bucket, async_op: bool) -> None:
        if self.group is None:
            return
        if self.recorder is not None and self.recorder.recording:
            bucket.launched_at = self.recorder.now()
        data = self.grads[bucket.start:bucket.end]
        if self.shard:
            lo, hi = bucket.owned(self.dp_rank, self.dp, True)
            bucket.scattered = torch.empty(hi - lo, dtype=data.dtype, device=data.device)  # no aliasing of input
            bucket.handle = dist.reduce_scatter_tensor(bucket.scattered, data, group=self.group, async_op=async_op)
        else:
            bucket.handle = dist.all_reduce(data, group=self.group, async_op=async_op)

    def reduce(self) -> None:
        """Finish the DP reduction of every bucket (those not started during backward start now)."""
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
        self.expected = 0

    def gather_params(self) -> None:
        """After a ZeRO-1 step: every DP rank's updated slice to every rank (all-gather per bucket)."""
        if not self.shard or self.group is None:
            return
        pending = []  # all buckets in flight at once: one wait for the slowest, not one per bucket
        for bucket in self.buckets:
            lo, hi = bucket.owned(self.dp_rank, self.dp, True)
            mine = self.params[lo:hi].clone()  # the output overlaps it; kept alive until the wait
            pending.append((mine, dist.all_gather_into_tensor(self.params[bucket.start:bucket.end], mine,
                                                              group=self.group, async_op=True)))
        for _, handle in pending:
            with watched(self.group, "wait parameter all_gather"):
                handle.wait(self.timeout)

    def param_range(self, param) -> tuple[int, int]:
        start = self.offsets[id(param)]
        return start, start + param.numel()


def all_reduce_coalesced(tensors: list[torch.Tensor], group, op=dist.ReduceOp.SUM) -> None:
    """Sum (by default) a few tensors in place across `group` with one collective."""
    if group is None or not tensors:
        return
    flat = _flatten_dense_tensors(tensors)
    with watched(group, "all_reduce"):
        dist.all_reduce(flat, op=op, group=group)
    for tensor, reduced in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
        tensor.copy_(reduced)
