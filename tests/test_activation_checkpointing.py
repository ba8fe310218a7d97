"""Activation checkpointing (full: keep block inputs; selective: recompute attention's core) gives
the same losses and weights as storing everything, with dropout on, alone and under TP+SP / PP."""
import numpy as np
import pytest

from distributed import run_distributed
from train_fixtures import RAMP, tiny_config, train_full

DROPOUT = ["model.hidden_dropout=0.1", "model.attention_dropout=0.1"]


MODES = ("none", "full", "selective")


def _every_mode(rank, world, overrides, out_dir):
    """{mode: losses} for each activation checkpointing mode, trained one after another in one group."""
    return {mode: train_full(tiny_config(*RAMP, *DROPOUT, *overrides, f"train.activation_checkpointing={mode}"),
                             f"{out_dir}/{mode}/r{rank}")[0] for mode in MODES}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world,layout", [(1, []), (2, ["parallel.tp=2", "parallel.sequence_parallel=true"]),
                                          (2, ["parallel.pp=2"])])
def test_checkpointing_modes_give_identical_losses(world, layout, tmp_path):
    if world == 1:
        losses = _every_mode(0, 1, layout, tmp_path)
    else:
        losses = run_distributed(_every_mode, world, layout, str(tmp_path))[-1]
    for mode in ("full", "selective"):
        np.testing.assert_array_equal(losses[mode], losses["none"], err_msg=mode)
