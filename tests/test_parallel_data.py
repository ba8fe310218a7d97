"""Data parallelism, ZeRO-1, mixed precision and the full 3D grid against one process."""
import numpy as np
import pytest
import torch

from distributed import run_distributed
from train_fixtures import (RAMP, VOCAB, DataParallelTraffic, RandomTokens, adam_state_sums, assert_matches,
                            run_summary, tiny_config, train_full)


def _rank(rank, world, overrides, out_dir):
    return train_full(tiny_config(*RAMP, *overrides), f"{out_dir}/r{rank}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train_full(tiny_config(*RAMP), tmp_path_factory.mktemp("single"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_3d_grid_of_8_matches_single_process(zero, reference, tmp_path):
    overrides = ["parallel.dp=2", "parallel.pp=2", "parallel.tp=2", f"parallel.zero_stage={zero}"]
    assert_matches(run_distributed(_rank, 8, overrides, str(tmp_path), timeout=200), reference)


def _every_stage(rank, world, out_dir):
    """Each ZeRO stage in turn on dp2, small buckets: the run's figures, its Adam state sums, and per
    step (logged DP bytes, DP bytes counted at torch.distributed, the docs' formula)."""
    from trident.parallel.layout_rules import dp_bytes_per_step
    from trident.train.trainer import Trainer

    results = {}
    for stage in range(4):
        config = tiny_config(*RAMP, "parallel.dp=2", f"parallel.zero_stage={stage}", "parallel.bucket_size_mb=0.01")
        trainer = Trainer(config, f"{out_dir}/zero{stage}/r{rank}", datasets=(RandomTokens(32), None),
                          vocab_size=VOCAB, log=lambda *a: None)
        records = []
        with DataParallelTraffic(trainer.mesh.group("dp")) as traffic:
            for _ in range(config.train.steps):
                records.append(trainer.train_step())
                traffic.step()
        elements = trainer.model.state_bytes()["weights"] // 4 * (2 if stage == 3 else 1)  # the padded flat buffer
        formula = [dp_bytes_per_step(stage, 2, elements, 4, r["batch_size"] // 4) for r in records]
        results[stage] = (run_summary(trainer, records), adam_state_sums(trainer),
                          ([r["dp_comm_bytes"] for r in records], traffic.per_step, formula))
    for stage in (0, 3):  # bf16 weights and compute, fp32 master weights; gradient clipping on (1.0) and off
        for clip in ("1.0", "0"):
            config = tiny_config(*RAMP, "parallel.dp=2", f"parallel.zero_stage={stage}", "train.precision=bf16",
                                 f"train.clip_grad={clip}")
            results[f"bf16 zero{stage} clip {clip}"] = train_full(config, f"{out_dir}/bf16-zero{stage}-{clip}/r{rank}")
    return results


def _assert_bf16_zero3_is_zero0(runs: dict) -> None:
    """bf16 ZeRO-3 against ZeRO-0. Without clipping, bit for bit: the gradients are accumulated and
    reduced in fp32, where sums of a few bf16 values are exact in any order. With clipping (the first two
    steps' norms here are > 1), each gradient is scaled by 1 / the global gradient norm, a sum of squares taken in
    another order at each stage (ZeRO-0: the whole gradient on each rank; ZeRO-3: each rank's owned
    slices, then an all-reduce): the norms differ by ~4e-7 relative, every gradient by that factor, and
    a master weight near a bf16 rounding boundary rounds to the neighbouring value (about 3 % of the
    weights after 3 steps); the third loss then differs by 1e-5 relative."""
    zero3, zero0 = runs["bf16 zero3 clip 0"], runs["bf16 zero0 clip 0"]
    assert zero3[0] == zero0[0]
    for name, weight in zero0[2].items():
        np.testing.assert_array_equal(zero3[2][name], weight, err_msg=name)
    np.testing.assert_allclose(zero3[3], zero0[3], rtol=2e-6)  # the norm itself: summed in another order
    zero3, zero0 = runs["bf16 zero3 clip 1.0"], runs["bf16 zero0 clip 1.0"]
    assert min(zero0[3][:2]) > 1.0  # clipping acted
    assert zero3[0][0] == zero0[0][0]
    np.testing.assert_allclose(zero3[0], zero0[0], rtol=2e-5)


@pytest.mark.timeout(120)
def test_every_zero_stage_on_dp2_matches_single_process_and_sends_what_the_formula_says(reference, tmp_path):
    ranks = run_distributed(_every_stage, 2, str(tmp_path))
    for stage in range(4):
        assert_matches([r[stage][0] for r in ranks], reference)
        np.testing.assert_allclose(ranks[0][stage][1], ranks[0][0][1], rtol=1e-5)  # the same Adam state
        for rank in ranks:  # DP bytes per step: logged == counted at torch.distributed == the docs' formula
            logged, counted, formula = rank[stage][2]
            assert logged == counted == formula, (stage, logged, counted, formula)
    assert ranks[0][3][1] == ranks[1][3][1]  # every rank sums every rank's pieces
    _assert_bf16_zero3_is_zero0(ranks[0])
    np.testing.assert_allclose(ranks[0]["bf16 zero3 clip 1.0"][0], reference[0], rtol=2e-2)  # as test_bf16_tracks_fp32


@pytest.mark.timeout(120)
def test_dp4_zero1_matches_single_process(reference, tmp_path):
    overrides = ["parallel.dp=4", "parallel.zero_stage=1", "parallel.bucket_size_mb=0.01"]
    assert_matches(run_distributed(_rank, 4, overrides, str(tmp_path)), reference)


def test_gradient_average_does_not_depend_on_micro_batch_split(reference, tmp_path):
    """micro-batch 1 (16 accumulation steps) gives the same run as micro-batch 2."""
    assert_matches([train_full(tiny_config(*RAMP, "train.micro_batch_size=1"), tmp_path)], reference)


def _state_bytes(rank, world):
    """The bytes each ZeRO stage keeps on this rank (weights, gradients, optimizer), and the parameter count."""
    from trident.train.trainer import Trainer

    held = {}
    for stage in range(4):
        config = tiny_config(f"parallel.dp={world}", f"parallel.zero_stage={stage}", "model.num_layers=4")
        trainer = Trainer(config, "/tmp/unused", datasets=(RandomTokens(32), None), vocab_size=VOCAB,
                          log=lambda *a: None)
        held[stage] = trainer.model.state_bytes()
    return held, sum(p.numel() for _, p in trainer.model.named_params)


@pytest.mark.timeout(120)
def test_each_zero_stage_shards_one_more_kind_of_state():
    """Stage 1 divides the optimizer state by dp, stage 2 the gradients too, stage 3 the weights too."""
    (single, params), = [_state_bytes(0, 1)]
    for stage in range(4):  # one replica: nothing to shard (buckets padded to 128 elements: parallel/buckets.py)
        assert single[stage] == pytest.approx({"weights": params * 4, "gradients": params * 4, "optimizer": params * 8},
                                              rel=0.01)
    for world in (2, 4):
        for held, _ in run_distributed(_state_bytes, world):
            for stage, kinds in held.items():
                sharded = {"optimizer", "gradients", "weights"} if stage == 3 else (
                    {"optimizer", "gradients"} if stage == 2 else {"optimizer"})
                for kind, nbytes in kinds.items():  # 1/dp of the state, up to bucket padding (128 x dp a bucket)
                    whole = single[0][kind] / (world if stage and kind in sharded else 1)
                    assert nbytes == pytest.approx(whole, rel=0.03), (world, stage, kind)


def test_bf16_tracks_fp32(reference, tmp_path):
    """bf16 weights/compute with fp32 master weights: losses within 2% of fp32 over the run."""
    losses = train_full(tiny_config(*RAMP, "train.precision=bf16"), tmp_path)[0]
    np.testing.assert_allclose(losses, reference[0], rtol=2e-2)


def _overflow_run(rank, world, precision, zero, spike_step):
    """Train 3 steps; on step `spike_step` rank 1's loss becomes inf (a loss spike on one rank)."""
    from trident.train.trainer import Trainer

    overrides = ["parallel.dp=2", "parallel.pp=2", f"parallel.zero_stage={zero}", f"train.precision={precision}",
                 "train.steps=3",
                 "train.loss_scale_hysteresis=1", "train.loss_scale_initial=1024", "train.warmup_tokens=0",
                 "model.seq_length=8"]  # fp16 matmul on CPU is ~1 GFLOP/s: keep it tiny
    trainer = Trainer(tiny_config(*overrides), "/tmp/unused", datasets=(RandomTokens(8), None),
                      vocab_size=VOCAB, log=lambda *a: None)
    if rank == 1 and trainer.mesh.is_last_stage:  # rank 1 = (dp 0, pp 1): corrupt its outputs once
        norm = trainer.model.chunks[-1].final_norm
        norm.register_forward_hook(lambda m, i, out: out * float("inf") if trainer.step == spike_step else out)
    records, weights = [], []
    for _ in range(3):
        before = {n: p.detach().float().clone() for n, p in trainer.model.held_weights()}
        records.append(trainer.train_step())
        weights.append(all(torch.equal(before[n], p.detach().float()) for n, p in trainer.model.held_weights()))
    return [(r["skipped"], r["loss_scale"]) for r in records], weights


@pytest.mark.timeout(120)
@pytest.mark.parametrize("precision,zero", [("fp16", 0), ("fp32", 0), ("fp16", 3)])
def test_overflow_is_skipped_on_every_rank(precision, zero):
    for records, unchanged in run_distributed(_overflow_run, 4, precision, zero, 1):
        assert [skipped for skipped, _ in records] == [False, True, False]
        assert unchanged == [False, True, False]  # the skipped step never touched the weights
        scales = [scale for _, scale in records]
        if precision == "fp16":
            assert scales == [1024.0, 512.0, 512.0]  # backed off once (hysteresis 1)
        else:
            assert scales == [1.0, 1.0, 1.0]


def test_config_rejects_batch_not_divisible_by_micro_batch_times_dp():
    from trident.config import ConfigError

    with pytest.raises(ConfigError, match="train.rampup_batch_size"):
        tiny_config(*RAMP, "parallel.dp=4", "train.rampup_batch_size=[4,4,256]").validate(4)
    with pytest.raises(ConfigError, match="train.global_batch_size"):
        tiny_config("train.global_batch_size=12", "train.micro_batch_size=4").validate(2)
