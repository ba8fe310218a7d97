"""The bucket-cutting rule (parallel/buckets.py), one function for the trainer's flat buffers and the
planner's model of them."""
from __future__ import annotations

import pytest
import torch

from train_fixtures import tiny_config


def test_buckets_close_at_the_size_hold_alone_parameters_apart_never_span_units_and_pad():
    from trident.parallel.buckets import cut_buckets

    cuts, offsets = cut_buckets([3, 5, 4, 2, 6], bucket_bytes=4 * 8, multiple=4, alone=[0, 0, 1, 0, 0])
    assert [(c.start, c.end, list(c.members)) for c in cuts] == [(0, 512, [0, 1]), (512, 1024, [2]),
                                                                 (1024, 1536, [3, 4])]
    assert offsets == [0, 3, 512, 1024, 1026]
    cuts, _ = cut_buckets([3, 5, 4], bucket_bytes=10**9, multiple=2, units=["a", "a", "b"])
    assert [(c.start, c.end, list(c.members)) for c in cuts] == [(0, 256, [0, 1]), (256, 512, [2])]


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_every_bucket_and_every_owned_slice_starts_on_128_elements(size):
    """Communication buffers aligned for NCCL's vector loads: a bucket's start, and each member's slice
    of it (what a reduce-scatter writes and an all-gather reads), at a multiple of 128 elements."""
    from trident.parallel.flat_layout import FlatLayout

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.empty(n)) for n in (1000, 77, 5, 3001, 129, 64, 1)]
    named = [(f"p{i}", p) for i, p in enumerate(params)]
    for shard in (False, True):
        for rank in range(size):
            layout = FlatLayout(named, None, size, rank, 4 * 1500, shard, alone=[params[2]])
            assert len(layout.buckets) >= 3
            for bucket in layout.buckets:
                lo, hi = layout.owned(bucket)
                assert bucket.start % 128 == lo % 128 == bucket.shard_start % 128 == (hi - lo) % 128 == 0


@pytest.mark.parametrize("stage", [2, 3])
def test_the_planner_cuts_the_buckets_the_trainer_cuts(stage):
    from trident.parallel.flat_layout import FlatLayout
    from trident.parallel.layout import rank_layout
    from trident.parallel.mesh import Mesh
    from trident.parallel.param_gather import unit_keys
    from trident.parallel.parallelize import build_model_chunks
    from trident.plan.memory import Layout
    from trident.plan.zero_buffers import buckets

    config = tiny_config("model.num_layers=3", "parallel.bucket_size_mb=0.004", f"parallel.zero_stage={stage}")
    layout = rank_layout(config, Mesh(dp=4))
    chunks = build_model_chunks(config.model, layout, Mesh(dp=4).tp_context(), seed=0, device=torch.device("cpu"))
    named = [item for chunk in chunks for item in chunk.named_parameters()]
    trainer = FlatLayout(named, None, 4, 0, int(0.004 * 2**20), True, unit_of=unit_keys(chunks) if stage == 3 else None)
    planned = buckets(config, Layout(tp=1, pp=1, dp=4, micro_batch=2, zero_stage=stage), 0)
    assert len(trainer.buckets) > 3
    assert [b.end - b.start for b in trainer.buckets] == [size for _, size in planned]
