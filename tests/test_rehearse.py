"""Rehearsal: a rank of a real layout through the real training code with a fake process group and
fake tensors measures what a real run of that rank allocates, and the command reports it beside the
planner's prediction."""
import json

import pytest

from distributed import run_distributed
from trident.config import load_config
from trident.parallel.mesh import build_mesh
from trident.rehearse.run import rehearse

LAYOUT = ["model.vocab_size=512", "parallel.pp=2", "parallel.dp=2", "train.global_batch_size=8",
          "train.micro_batch_size=2", "train.rampup_batch_size=null"]
# gloo has no native reduce-scatter: it all-reduces a full copy of each bucket and keeps its share,
# a temporary NCCL does not make (and the fake process group does not model)
GLOO_REDUCE_SCATTER_COPY = {"buffers"}


def _real_rank(rank, world, overrides):
    from trident.rehearse.rank import measure

    config = load_config("tiny", overrides)
    config.validate(world)
    return measure(config, build_mesh(config.parallel.tp, config.parallel.pp, config.parallel.dp))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("extra,ranks", [([], (0, 3)),
                                         (["parallel.tp=2", "parallel.pp=1", "train.activation_checkpointing=full"],
                                          (0, 3)),
                                         (["parallel.pp=1", "parallel.dp=4", "parallel.zero_stage=1"], (0, 3)),
                                         (["parallel.zero_stage=3", "train.activation_checkpointing=full"], (0,))])
def test_rehearsal_measures_what_a_real_run_allocates(extra, ranks):
    overrides = LAYOUT + extra
    world = 4
    real = run_distributed(_real_rank, world, overrides, timeout=150)
    unlike = GLOO_REDUCE_SCATTER_COPY if any(key.startswith("parallel.zero_stage") for key in extra) else set()
    config = load_config("tiny", overrides)
    config.validate(world)
    rehearsed = rehearse(config, world, list(ranks))["ranks"]  # each rank in a fresh process
    for rank, fake in zip(ranks, rehearsed):
        assert fake["parameters"] == real[rank]["parameters"]
        for category, value in real[rank]["measured"].items():
            assert value > 0, (rank, category)
            if category not in unlike:
                assert fake["measured"][category] == pytest.approx(value, rel=0.05), (rank, category)
        assert fake["checkpoint_files"] == real[rank]["checkpoint_files"]


@pytest.mark.timeout(120)
def test_command_prints_measured_and_planned_memory_per_rank(capsys):
    from trident.cli import main

    assert main(["rehearse", "tiny", *LAYOUT, "--gpus", "4", "--ranks", "0,3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["layout"]["pp"] == 2 and result["layout"]["dp"] == 2
    assert [r["rank"] for r in result["ranks"]] == [0, 3] and [r["stage"] for r in result["ranks"]] == [0, 1]
    for rank in result["ranks"]:
        assert set(rank["measured"]) == {"weights", "gradients", "optimizer", "activations", "buffers", "peak"}
        assert set(rank["plan"]) == {"weights", "gradients", "optimizer", "activations", "buffers", "total"}
        assert rank["measured"]["weights"] == rank["plan"]["weights"]  # fp32: 4 bytes a parameter, both ways
        assert rank["seconds"] > 0 and rank["checkpoint_files"]


@pytest.mark.parametrize("args,message", [(["--ranks", "9"], "outside the world of 4"),
                                          (["model.vocab_size=0"], "model.vocab_size"),
                                          (["parallel.tp=3"], "parallel")])
def test_bad_requests_fail_at_start_with_exit_2(args, message, capsys):
    from trident.cli import main

    assert main(["rehearse", "tiny", *LAYOUT, "--gpus", "4", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_phase_peak_never_counts_what_reference_cycles_left_from_the_phase_before():
    """A tensor an earlier phase left in a reference cycle is freed before the next phase is measured,
    whenever Python's own cyclic gc would have run (it once added 8 KB to a real rank's "buffers")."""
    import gc

    import torch

    from trident.rehearse.live_bytes import LiveBytes
    from trident.rehearse.rank import _step

    class CycleLeavingModel:
        def train_step(self, batches, divisor, lr, on_phase):
            cycle = {"activation": torch.ones(2048)}
            cycle["self"] = cycle  # garbage once this frame ends, freed only by the cyclic gc
            del cycle
            on_phase("forward_backward")
            torch.ones(16)  # a temporary, freed at once
            on_phase("finalize")
            on_phase("step")

    gc.disable()
    gc.freeze()  # as measure() does: the collections scan only what the step makes
    try:
        with LiveBytes() as live:
            peaks = _step(CycleLeavingModel(), live, [], 1, 0.0)
    finally:
        gc.unfreeze()
        gc.enable()
    assert peaks == {"forward_backward": 2048 * 4, "finalize": 16 * 4, "step": 0}
