"""Hybrid sharding (`parallel.dp_shard`, issue 53 item 2): dp4 with ZeRO over shard groups of 2 DP ranks,
replicated across 2, against one process; its checkpoints load in any layout bit for bit; a dp_shard
that does not divide dp exits 2 naming the keys."""
from __future__ import annotations

import numpy as np
import pytest

from distributed import run_distributed
from train_fixtures import (BASE, RAMP, STOP, assert_matches, full_state, make_trainer, run_steps, run_summary,
                            tiny_config, train_full, trained)
from trident.checkpoint.reader import complete_checkpoints

HYBRID = ["parallel.dp=4", "parallel.dp_shard=2"]
KINDS = ("weight", "exp_avg", "exp_avg_sq")


def _hybrid(rank, world, out_dir):
    """ZeRO-3, -2 and -1 at dp4 x dp_shard 2: their figures, logged DP bytes and the formula's; a ZeRO-3
    checkpoint after STOP steps, its every kind of state, and that state as dp4 without hybrid sharding
    loads it."""
    from trident.parallel.hybrid import hybrid_group_ranks
    from trident.parallel.layout_rules import dp_bytes_per_step

    runs = {}
    for stage in (3, 2, 1):
        config = tiny_config(*RAMP, *HYBRID, f"parallel.zero_stage={stage}")
        trainer, records = trained(config, f"{out_dir}/z{stage}/r{rank}")
        elements = trainer.model.state_bytes()["weights"] // 4 * (2 if stage == 3 else 1)  # the padded flat buffer
        formula = [dp_bytes_per_step(stage, 4, elements, 4, r["batch_size"] // 8, shard=2) for r in records]
        runs[stage] = (run_summary(trainer, records), [r["dp_comm_bytes"] for r in records], formula)
        held, flat = trainer.model.state_bytes(), trainer.model.optimizer.layout.total * 4  # fp32: 4 bytes an element
        assert held == {"weights": flat // (2 if stage == 3 else 1), "gradients": flat // (2 if stage >= 2 else 1),
                        "optimizer": 2 * flat // 2}  # as ZeRO at dp = K = 2: Adam's m and v over 1/K
    singles = ["parallel.dp=4", "parallel.dp_shard=1", "parallel.zero_stage=3"]  # shard groups of one: all replicas
    runs["k1"] = train_full(tiny_config(*RAMP, *singles), f"{out_dir}/k1/r{rank}")
    _, trainer = run_steps([*HYBRID, "parallel.zero_stage=3"], f"{out_dir}/save", stop=STOP, with_trainer=True)
    saved = {kind: full_state(trainer, kind) for kind in KINDS}
    path = str(complete_checkpoints(f"{out_dir}/save/ckpt")[-1])
    plain = make_trainer(tiny_config(*BASE, "parallel.dp=4", "parallel.zero_stage=3", f"checkpoint.load={path}"),
                         f"{out_dir}/plain")
    groups = hybrid_group_ranks([[0, 1, 2, 3]], 2)
    return runs, saved, {kind: full_state(plain, kind) for kind in KINDS}, path, groups


@pytest.mark.timeout(280)
def test_dp4_sharded_over_pairs_matches_one_process_and_its_checkpoint_loads_anywhere(tmp_path):
    reference = train_full(tiny_config(*RAMP), tmp_path / "single")
    ranks = run_distributed(_hybrid, 4, str(tmp_path), timeout=270)
    for stage in (3, 2, 1):
        assert_matches([rank[0][stage][0] for rank in ranks], reference)
        for rank in ranks:  # intra-group reduce-scatter/all-gather and the inter-group all-reduce, as documented
            assert rank[0][stage][1] == rank[0][stage][2], stage
    assert_matches([rank[0]["k1"] for rank in ranks], reference)
    _, saved, plain, path, groups = ranks[0]
    assert groups == {"dp_shard": [[0, 1], [2, 3]], "dp_replica": [[0, 2], [1, 3]]}
    one = make_trainer(tiny_config(*BASE, f"checkpoint.load={path}"), tmp_path / "one")
    for loaded in (plain, {kind: full_state(one, kind) for kind in KINDS}):
        for kind in KINDS:
            assert loaded[kind].keys() == saved[kind].keys()
            for name, value in loaded[kind].items():
                np.testing.assert_array_equal(value, saved[kind][name], err_msg=f"{kind} {name}")


@pytest.mark.parametrize("overrides,message", [
    (["parallel.dp_shard=3", "parallel.zero_stage=3"], "3 does not divide parallel.dp=4"),
    (["parallel.dp_shard=2"], "parallel.zero_stage=0 shards nothing")])
def test_a_dp_shard_that_cannot_shard_exits_2_naming_the_keys(tmp_path, capsys, overrides, message):
    from trident.cli import main

    assert main(["train", "tiny", "parallel.dp=4", *overrides, "--nproc", "4", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "parallel.dp_shard" in err and message in err and "Traceback" not in err
