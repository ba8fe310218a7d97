"""Data-parallel gradient reduction: gradients flattened into buckets of `bucket_bytes` and reduced
with one collective per bucket (fewer, larger messages than one per parameter)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def buckets_of(tensors: list[torch.Tensor], bucket_bytes: int) -> list[list[torch.Tensor]]:
    """Consecutive tensors grouped so each bucket holds about `bucket_bytes` (one dtype per bucket)."""
    buckets: list[list[torch.Tensor]] = []
    current: list[torch.Tensor] = []
    size = 0
    for tensor in tensors:
        if current and (size + tensor.numel() * tensor.element_size() > bucket_bytes or tensor.dtype != current[0].dtype):
            buckets.append(current)
            current, size = [], 0
        current.append(tensor)
        size += tensor.numel() * tensor.element_size()
    if current:
        buckets.append(current)
    return buckets


def all_reduce_coalesced(tensors: list[torch.Tensor], group, bucket_bytes: int = 25 * 2**20,
                         op=dist.ReduceOp.SUM) -> None:
    """Sum (by default) `tensors` in place across `group`, bucket by bucket. No-op for a group of one."""
    if group is None or not tensors:
        return
    for bucket in buckets_of(tensors, bucket_bytes):
        flat = _flatten_dense_tensors(bucket)
        dist.all_reduce(flat, op=op, group=group)
        for tensor, reduced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
            tensor.copy_(reduced)
