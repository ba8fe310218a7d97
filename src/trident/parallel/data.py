"""Data parallelism: parameters and fp32 gradients in flat contiguous buffers, cut into buckets that
are reduced across DP ranks with one collective each.

Parameters are laid out in reverse order (the order backward finishes them), so with
`overlap=True` a bucket's reduction starts, asynchronously, as soon as the last micro-batch's
backward has produced every gradient in it. Each bucket is padded to a multiple of dp so that with
ZeRO-1 (`shard=True`) a reduce-scatter leaves DP rank r the r-th 1/dp of every bucket: the part of
the model whose optimizer state it owns. Without ZeRO every rank owns everything (all-reduce).
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
    ready: int = 0
    handle: object = None
    scattered: torch.Tensor | None = None  # reduce-scatter output, copied into place on completion

    def owned(self, dp_rank: int, dp: int, shard: bool) -> tuple[int, int]:
        if not shard:
            return self.start, self.end
        size = (self.end - self.start) // dp
        return self.start + dp_rank * size, self.start + (dp_rank + 1) * size


class GradBuffers:
    """Flat parameter buffer (model dtype) and fp32 gradient buffer with DP bucket reduction."""

    def __init__(self, named_params: list, dp_group, dp: int, dp_rank: int, bucket_bytes: int,
                 shard: bool = False, overlap: bool = False, timeout_s: float = 600.0):
        self.named_params = list(reversed(named_params))
        self.group, self.dp, self.dp_rank, self.shard, self.overlap = dp_group, dp, dp_rank, shard, overlap
        self.timeout = timedelta(seconds=timeout_s)  # an explicit bound: a hung peer must not hang us
        self.offsets: dict[int, int] = {}  # id(param) -> flat offset
        self.buckets: list[Bucket] = []
        position, bucket_params, bucket_start = 0, [], 0
        for _, param in self.named_params:
            self.offsets[id(param)] = position
            position += param.numel()
            bucket_params.append(param)
            if (position - bucket_start) * 4 >= bucket_bytes:
                position = self._close_bucket(bucket_start, position, bucket_params)
                bucket_start, bucket_params = position, []
        if bucket_params:
            position = self._close_bucket(bucket_start, position, bucket_params)
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
        self.final_microbatch = False

    def _close_bucket(self, start: int, end: int, params: list) -> int:
        padded = start + -(-(end - start) // self.dp) * self.dp
        self.buckets.append(Bucket(start, padded, list(params)))
        return padded

    def owned_ranges(self) -> list[tuple[int, int]]:
        return [b.owned(self.dp_rank, self.dp, self.shard) for b in self.buckets]

    def _accumulate(self, param) -> None:
        """fp32 accumulation across micro-batches; the low-precision .grad is dropped at once."""
        param.main_grad.add_(param.grad)
        param.grad = None
        if self.overlap and self.final_microbatch:
            bucket = self.bucket_of[id(param)]
            bucket.ready += 1
            if bucket.ready == len(bucket.params):
                self._launch(bucket, async_op=True)

    def zero_grad(self) -> None:
        self.grads.zero_()
        for bucket in self.buckets:
            bucket.ready, bucket.handle = 0, None

    def _launch(self, bucket: Bucket, async_op: bool) -> None:
        if self.group is None:
            return
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
        for bucket in self.buckets:
            if bucket.handle is not None:
                with watched(self.group):
                    bucket.handle.wait(self.timeout)
            if bucket.scattered is not None:
                lo, hi = bucket.owned(self.dp_rank, self.dp, True)
                self.grads[lo:hi].copy_(bucket.scattered)
                bucket.scattered = None
        self.final_microbatch = False

    def gather_params(self) -> None:
        """After a ZeRO-1 step: every DP rank's updated slice to every rank (all-gather per bucket)."""
        if not self.shard or self.group is None:
            return
        for bucket in self.buckets:
            lo, hi = bucket.owned(self.dp_rank, self.dp, True)
            with watched(self.group):
                dist.all_gather_into_tensor(self.params[bucket.start:bucket.end], self.params[lo:hi].clone(),
                                            group=self.group)

    def param_range(self, param) -> tuple[int, int]:
        start = self.offsets[id(param)]
        return start, start + param.numel()


def all_reduce_coalesced(tensors: list[torch.Tensor], group, op=dist.ReduceOp.SUM) -> None:
    """Sum (by default) a few tensors in place across `group` with one collective."""
    if group is None or not tensors:
        return
    flat = _flatten_dense_tensors(tensors)
    with watched(group):
        dist.all_reduce(flat, op=op, group=group)
    for tensor, reduced in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
        tensor.copy_(reduced)
