"""Checkpoints: exact resume, resharding between layouts, atomicity under SIGKILL, retention."""
import json
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

from distributed import run_distributed
from train_fixtures import BASE, STOP, full_state, make_trainer, rank_steps, run_layout, run_steps, tiny_config
from trident.checkpoint.reader import CheckpointReader, complete_checkpoints, resolve_checkpoint
from trident.checkpoint.writer import prune_checkpoints


@pytest.mark.timeout(120)
@pytest.mark.parametrize("extra", [[], ["checkpoint.async_save=true", "train.precision=bf16"]])
def test_resume_is_exact_with_dropout(extra, tmp_path):
    overrides = ["model.hidden_dropout=0.1", "model.attention_dropout=0.1", *extra]
    whole = run_steps(overrides, tmp_path / "whole")
    first = run_steps(overrides, tmp_path / "split", stop=STOP)
    second = run_steps(overrides, tmp_path / "split", load="auto")
    assert first + second == whole  # bit-identical: data order, dropout masks, LR, ramp-up


@pytest.mark.timeout(180)
def test_resume_is_exact_in_3d_with_zero(tmp_path):
    overrides = ["parallel.dp=2", "parallel.pp=2", "parallel.zero_stage=1", "model.hidden_dropout=0.1"]
    whole = run_distributed(rank_steps, 4, overrides, str(tmp_path / "whole"), None, "")
    first = run_distributed(rank_steps, 4, overrides, str(tmp_path / "split"), STOP, "")
    second = run_distributed(rank_steps, 4, overrides, str(tmp_path / "split"), None, "auto")
    for rank in range(4):
        assert first[rank] + second[rank] == whole[rank]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_steps([], tmp_path_factory.mktemp("one"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("source,target", [("tp2_pp2", "tp4"), ("pp2_dp2_zero1", "tp2"),
                                           ("single", "tp2_pp2_dp2"), ("dp2_zero1", "single"),
                                           ("dp2", "tp2_pp2"), ("pp2_dp2_zero3", "tp2"), ("tp2_pp2", "dp2_zero3")])
def test_checkpoint_reshards_to_another_layout(source, target, uninterrupted, tmp_path):
    """Save after STOP steps in one layout, continue in another: the losses of the continued run
    equal the uninterrupted run's, so the weights and the optimizer state both came across."""
    first = run_layout(source, tmp_path / "a", stop=STOP)
    path = complete_checkpoints(tmp_path / "a" / "ckpt")[-1]
    second = run_layout(target, tmp_path / "b", load=str(path))
    np.testing.assert_allclose(first + second, uninterrupted, rtol=1e-5)


STATE_KINDS = ("weight", "master", "exp_avg", "exp_avg_sq")


def _across_zero_stages(rank, world, out_dir):
    """On dp2, bf16 (separate fp32 masters), dropout on: one checkpoint saved at each ZeRO stage 0-3,
    each loaded at every stage 0-3 (16 pairs: whole weights and Adam state at 0, owned slices at 1-3):
    every kind of state is bit for bit the saved one; a stage-3 run resumed from its checkpoint gives
    the uninterrupted run's losses exactly. Returns the pairs checked, and both runs' losses."""
    # 3 layers (BASE has 4): fewer tensors in each of the 20 loads; ZeRO's dp2 cut still falls inside a row of a
    # matrix (2 layers: on a row boundary, and a broken partial-row read passes; checked)
    base = ["parallel.dp=2", "train.precision=bf16", "model.hidden_dropout=0.1", "model.num_layers=3"]
    checked, losses = [], {}
    for saved_at in range(4):
        losses[saved_at], trainer = run_steps([*base, f"parallel.zero_stage={saved_at}"], f"{out_dir}/{saved_at}",
                                              stop=STOP, with_trainer=True)
        saved = {kind: full_state(trainer, kind) for kind in STATE_KINDS}
        path = complete_checkpoints(f"{out_dir}/{saved_at}/ckpt")[-1]
        for stage in range(4):
            config = tiny_config(*BASE, *base, f"parallel.zero_stage={stage}", f"checkpoint.load={path}")
            loaded = make_trainer(config, f"{out_dir}/{saved_at}/load{stage}")
            for kind in STATE_KINDS:
                held = full_state(loaded, kind)
                assert held.keys() == saved[kind].keys(), (saved_at, stage, kind)
                for name, value in held.items():
                    np.testing.assert_array_equal(value, saved[kind][name],
                                                  err_msg=f"{saved_at}->{stage} {kind} {name}")
            checked.append((saved_at, stage))
    zero3 = [*base, "parallel.zero_stage=3"]
    second = run_steps(zero3, f"{out_dir}/3", load="auto")
    return checked, losses[3] + second, run_steps(zero3, f"{out_dir}/whole")


@pytest.mark.timeout(180)
def test_checkpoints_load_bit_exactly_across_every_zero_stage_pair_and_resume_exactly(tmp_path):
    for checked, resumed, whole in run_distributed(_across_zero_stages, 2, str(tmp_path), timeout=170):
        assert checked == [(saved, loaded) for saved in range(4) for loaded in range(4)]
        assert resumed == whole


def _train_forever(out_dir):
    os.environ["OMP_NUM_THREADS"] = "1"
    trainer = make_trainer(tiny_config("train.steps=100000", f"checkpoint.dir={out_dir}",
                                       "checkpoint.keep_last=2", "checkpoint.load=auto"), out_dir)
    while True:
        trainer.train_step()
        trainer.save()


@pytest.mark.timeout(120)
def test_sigkill_never_leaves_a_complete_looking_partial_checkpoint(tmp_path):
    context = mp.get_context("fork")
    for delay in (0.3, 0.45, 0.6, 0.8, 1.0, 1.25, 1.5, 1.8):  # a kill lands in a different phase each time
        proc = context.Process(target=_train_forever, args=(tmp_path,), daemon=True)
        proc.start()
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        for path in complete_checkpoints(tmp_path):
            reader = CheckpointReader(path)
            for name in reader.names("model") + reader.names("exp_avg"):
                reader.read(name, "model" if name in reader.names("model") else "exp_avg")
            assert json.loads((path / "trainer_state.json").read_text())["step"] == int(path.name.split("_")[1])
        newest = resolve_checkpoint("auto", tmp_path)
        if newest is not None:  # what a restart would load: complete, readable, and it resumes
            make_trainer(tiny_config("train.steps=100000", f"checkpoint.load={newest}"), tmp_path / "resume")


def test_keep_last_and_incomplete_checkpoints_are_ignored(tmp_path):
    trainer = make_trainer(tiny_config("train.steps=4", "checkpoint.save_interval=1", "checkpoint.keep_last=2",
                                       f"checkpoint.dir={tmp_path}"), tmp_path)
    trainer.train()
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_0000003", "step_0000004"]
    (tmp_path / "step_0000009").mkdir()  # a newer folder without COMPLETE: a crashed save
    assert resolve_checkpoint("auto", tmp_path).name == "step_0000004"
    with pytest.raises(FileNotFoundError, match="COMPLETE"):
        CheckpointReader(tmp_path / "step_0000009")
    prune_checkpoints(tmp_path, keep_last=0)  # 0 keeps everything; the newest is never deleted
    prune_checkpoints(tmp_path, keep_last=1)
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_0000004"]


@pytest.mark.timeout(200)
def test_resume_on_fewer_data_parallel_ranks_continues_the_same_run(tmp_path):
    """What an elastic restart on fewer nodes does: the global batch, the sample order and the LR
    schedule carry over, so the losses after the resume equal the uninterrupted run's (same TP/PP)."""
    whole = run_layout("pp2_dp2_zero1", tmp_path / "whole")
    first = run_layout("pp2_dp2_zero1", tmp_path / "a", stop=STOP)
    second = run_layout("pp2", tmp_path / "b", load=str(complete_checkpoints(tmp_path / "a" / "ckpt")[-1]))
    assert first == whole[:STOP]
    np.testing.assert_allclose(second, whole[STOP:], rtol=1e-6)
