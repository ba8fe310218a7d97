"""Where each parameter lives in data parallelism's flat buffers, and which slice of each bucket this
rank owns: the layout the weights (param_buffers.py) and the fp32 gradients (data.py) share.

Parameters are laid out in reverse order (the order backward finishes them) and cut into buckets by
buckets.py's rule, each padded to a multiple of 128 x the group ZeRO shards over (the gradient group dp x cp,
or a shard group of it under hybrid sharding, hybrid.py); member r of that group owns the r-th 1/size of every
bucket with ZeRO (`shard`), all of it without. A buffer holds the whole flat range or, compact, only
the owned slices one after another (`shard_start`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trident.parallel.buckets import cut_buckets
from trident.parallel.hybrid import NO_REPLICAS, Replicas


@dataclass
class Bucket:
    start: int  # flat offset of the bucket
    end: int  # exclusive, padded to a multiple of 128 x the shard group's size
    params: list  # parameters inside
    index: int = 0  # its place in FlatLayout.buckets
    shard_start: int = 0  # where its owned slice sits in the compact (owned-only) buffers
    ready: int = 0  # parameters whose gradient is final this step
    handle: object = None
    scattered: torch.Tensor | None = None  # reduce-scatter output, copied into place on completion
    launched_at: object = None  # a mark of the timeline recorder's clock (device_clock.py), while it records
    staging: torch.Tensor | None = None  # stage >= 2: gradients added since the last reduce-scatter
    fresh: set = field(default_factory=set)  # stage >= 2: ids of the parameters added to `staging`
    full: torch.Tensor | None = None  # stage 3: the gathered parameters, while in use
    gathering: tuple | None = None  # stage 3: (output, work) of an all-gather in flight

    def owned(self, rank: int, size: int, shard: bool) -> tuple[int, int]:
        if not shard:
            return self.start, self.end
        part = (self.end - self.start) // size
        return self.start + rank * part, self.start + (rank + 1) * part


def ring_bytes(nbytes: int, size: int, collective: str) -> int:
    """Bytes one member sends in a ring collective over `nbytes` (the full buffer) among `size` ranks."""
    share = nbytes * (size - 1) // size
    return 2 * share if collective == "all_reduce" else share


class FlatLayout:
    """Offsets, buckets and owned slices of `named_params` over `group` (`size` members, this rank the
    `rank`-th); `shard`: ZeRO (stage >= 1) owns 1/size of each bucket; `replicas`: the copies of this
    rank's shards under hybrid sharding."""

    def __init__(self, named_params: list, group, size: int, rank: int, bucket_bytes: int, shard: bool,
                 alone=(), unit_of=None, replicas: Replicas = NO_REPLICAS):
        self.named_params = list(reversed(named_params))
        self.group, self.size, self.rank, self.shard, self.replicas = group, size, rank, shard, replicas
        params = [param for _, param in self.named_params]
        held_alone, unit_of = {id(param) for param in alone}, unit_of or {}
        cuts, offsets = cut_buckets([param.numel() for param in params], bucket_bytes, size,
                                    [unit_of.get(id(param)) for param in params],
                                    [id(param) in held_alone for param in params])
        self.offsets = {id(param): offset for param, offset in zip(params, offsets)}  # id(param) -> flat offset
        self.shapes = {id(param): param.shape for param in params}
        self.buckets = [Bucket(cut.start, cut.end, [params[i] for i in cut.members], index)
                        for index, cut in enumerate(cuts)]
        self.total = cuts[-1].end if cuts else 0  # the whole flat size, padding included
        self.compact_total = 0  # the owned slices' size
        for bucket in self.buckets:
            bucket.shard_start = self.compact_total
            self.compact_total += (bucket.end - bucket.start) // size
        self.bucket_of = {id(param): bucket for bucket in self.buckets for param in bucket.params}

    def owned(self, bucket: Bucket) -> tuple[int, int]:
        """[lo, hi) of the bucket's flat range this rank owns."""
        return bucket.owned(self.rank, self.size, self.shard)

    def owned_ranges(self) -> list[tuple[int, int]]:
        return [self.owned(bucket) for bucket in self.buckets]

    def owned_part(self, tensor: torch.Tensor, bucket: Bucket, compact: bool) -> torch.Tensor:
        """The bucket's owned slice of a flat `tensor` (whole, or `compact`: owned slices only)."""
        lo, hi = self.owned(bucket)
        return tensor[bucket.shard_start:bucket.shard_start + hi - lo] if compact else tensor[lo:hi]

    def owned_slice(self, param) -> tuple[int, int]:
        """[a, b) of the parameter's flattened tensor that lies in this rank's owned range (a == b: none)."""
        start, end = self.param_range(param)
        lo, hi = self.owned(self.bucket_of[id(param)])
        a, b = max(start, lo) - start, min(end, hi) - start
        return (a, b) if a < b else (0, 0)

    def owned_view(self, tensor: torch.Tensor, param, compact: bool) -> torch.Tensor:
        """The owned part of `param` in a flat `tensor` (whole, or `compact`), 1-D."""
        a, b = self.owned_slice(param)
        start = self.offsets[id(param)]
        if not compact:
            return tensor[start + a:start + b]
        bucket = self.bucket_of[id(param)]
        at = bucket.shard_start + start + a - self.owned(bucket)[0]
        return tensor[at:at + b - a]

    def param_range(self, param) -> tuple[int, int]:
        start = self.offsets[id(param)]
        return start, start + param.numel()
