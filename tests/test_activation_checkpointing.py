"""Activation checkpointing (full: keep block inputs; selective: recompute attention's core) gives
the same losses and weights as storing everything, with dropout on, alone and under TP+SP / PP."""
import numpy as np
import pytest

from distributed import run_distributed
from train_fixtures import RAMP, tiny_config, train_full

DROPOUT = ["model.hidden_dropout=0.1", "model.attention_dropout=0.1"]


def _rank(rank, world, overrides, out_dir):
    return train_full(tiny_config(*RAMP, *DROPOUT, *overrides), f"{out_dir}/r{rank}")[0]


def _losses(world, overrides, out_dir):
    if world == 1:
        return train_full(tiny_config(*RAMP, *DROPOUT, *overrides), out_dir)[0]
    return run_distributed(_rank, world, overrides, str(out_dir))[-1]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world,layout", [(1, []), (2, ["parallel.tp=2", "parallel.sequence_parallel=true"]),
                                          (2, ["parallel.pp=2"])])
def test_checkpointing_modes_give_identical_losses(world, layout, tmp_path):
    plain = _losses(world, layout, tmp_path / "none")
    for mode in ("full", "selective"):
        recomputed = _losses(world, [*layout, f"train.activation_checkpointing={mode}"], tmp_path / mode)
        np.testing.assert_array_equal(recomputed, plain, err_msg=mode)
