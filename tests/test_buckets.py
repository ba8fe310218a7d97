"""The bucket-cutting rule (parallel/buckets.py), one function for the trainer's flat buffers and the
planner's model of them."""
from __future__ import annotations

import pytest
import torch

from train_fixtures import tiny_config


def test_buckets_close_at_the_size_hold_alone_parameters_apart_never_span_units_and_pad():
    from trident.parallel.buckets import cut_buckets

    cuts, offsets = cut_buckets([3, 5, 4, 2, 6], bucket_bytes=4 * 8, multiple=4, alone=[0, 0, 1, 0, 0])
    assert [(c.start, c.end, list(c.members)) for c in cuts] == [(0, 8, [0, 1]), (8, 12, [2]), (12, 20, [3, 4])]
    assert offsets == [0, 3, 8, 12, 14]
    cuts, _ = cut_buckets([3, 5, 4], bucket_bytes=10**9, multiple=2, units=["a", "a", "b"])
    assert [(c.start, c.end, list(c.members)) for c in cuts] == [(0, 8, [0, 1]), (8, 12, [2])]


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
