"""The weights of data parallelism: one flat buffer in the model's dtype over flat_layout.py's layout,
whole (ZeRO stages 0-2: the model trains on views of it) or only this rank's owned slices (stage 3),
and the all-gathers that make them whole again:
  1, 2  after each step every rank's updated slice goes to every rank (`gather_params`);
  3     a bucket's full parameters exist only between `gather` and `release` (param_gather.py decides
        when); outside, each parameter is a one-element placeholder of its shape.
`sent_bytes` counts this rank's share of those all-gathers since it was last set to 0.
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from trident.parallel.flat_layout import Bucket, FlatLayout, ring_bytes
from trident.parallel.watch import watched


class ParamBuffers:
    """The flat weights of `layout` (whole, or owned slices only at `stage` 3); each parameter's values
    move into them when it is built."""

    def __init__(self, layout: FlatLayout, stage: int, timeout_s: float = 600.0):
        self.layout, self.stage = layout, stage
        self.timeout = timedelta(seconds=timeout_s)  # on the CPU, a bound on the host's wait (watched.wait)
        first = layout.named_params[0][1] if layout.named_params else torch.empty(0)
        self.params = torch.zeros(layout.compact_total if stage == 3 else layout.total, dtype=first.dtype,
                                  device=first.device)
        self.placeholder = torch.zeros(1, dtype=first.dtype, device=first.device)  # stage 3: released parameters
        for _, param in layout.named_params:
            self._adopt(param)
        self.owned_param_views = [layout.owned_part(self.params, b, stage == 3) for b in layout.buckets]
        self.sent_bytes = 0

    def _adopt(self, param) -> None:
        """The parameter's values move into the flat buffer (its owned slice only, at stage 3)."""
        start, end = self.layout.param_range(param)
        if self.stage == 3:
            a, b = self.layout.owned_slice(param)
            self.owned_param(param).copy_(param.data.reshape(-1)[a:b])
            self._release_param(param)
        else:
            view = self.params[start:end].view_as(param)
            view.copy_(param.data)
            param.data = view  # the model now trains on the flat buffer

    def owned_param(self, param) -> torch.Tensor:
        """The owned part of the parameter's values, 1-D: what this rank updates and saves."""
        return self.layout.owned_view(self.params, param, compact=self.stage == 3)

    def _count(self, bucket: Bucket) -> None:
        self.sent_bytes += ring_bytes((bucket.end - bucket.start) * self.params.element_size(), self.layout.size,
                                      "all_gather")

    def gather_params(self) -> None:
        """After a ZeRO-1 or -2 step: every rank's updated slice to every member of the shard group
        (all-gather per bucket). At stage 3 nothing is gathered here: each bucket is gathered when it
        is next used."""
        group = self.layout.group
        if not self.layout.shard or self.stage == 3 or group is None:
            return
        pending = []  # all buckets in flight at once: one wait for the slowest, not one per bucket
        for bucket in self.layout.buckets:
            lo, hi = self.layout.owned(bucket)
            mine = self.params[lo:hi].clone()  # the output overlaps it; kept alive until the wait
            self._count(bucket)
            pending.append((mine, dist.all_gather_into_tensor(self.params[bucket.start:bucket.end], mine,
                                                              group=group, async_op=True)))
        for _, handle in pending:
            with watched(group, "wait parameter all_gather") as watch:
                watch.wait(handle, self.timeout, self.params.is_cuda)

    # ---- stage 3: a bucket's full parameters, while in use --------------------------------------
    def gather(self, bucket: Bucket, wait: bool = True) -> None:
        """Start the bucket's all-gather unless it is gathered or under way; with `wait`, finish it and
        point its parameters at the gathered values."""
        if bucket.full is not None:
            return
        group = self.layout.group
        if bucket.gathering is None:
            output = torch.empty(bucket.end - bucket.start, dtype=self.params.dtype, device=self.params.device)
            self._count(bucket)
            mine = self.owned_param_views[bucket.index]
            if group is None:  # hybrid sharding over groups of one: nothing to gather
                bucket.gathering = (output.copy_(mine), None)
            else:
                bucket.gathering = (output, dist.all_gather_into_tensor(output, mine, group=group, async_op=True))
        if not wait:
            return
        output, work = bucket.gathering
        if work is not None:
            with watched(group, "wait parameter all_gather") as watch:
                watch.wait(work, self.timeout, output.is_cuda)
        bucket.gathering, bucket.full = None, output
        for param in bucket.params:
            start = self.layout.offsets[id(param)] - bucket.start
            param.data = output[start:start + param.numel()].view(self.layout.shapes[id(param)])

    def release(self, bucket: Bucket) -> None:
        """Drop the bucket's gathered parameters (what autograd saved of them is rebuilt on regather);
        an all-gather of it still under way (a prefetch nothing used) is finished first."""
        if bucket.gathering is not None:
            self.gather(bucket)
        if bucket.full is None:
            return
        bucket.full = None
        for param in bucket.params:
            self._release_param(param)

    def _release_param(self, param) -> None:
        param.data = self.placeholder.expand(self.layout.shapes[id(param)])  # its shape, one element of memory
