"""Stragglers: a rank slowed by an injected slow forward in pp2 x dp2 is named with its section, and
the seconds it costs each step (a replay of the measured step through the pipeline simulator with
that rank at its peers' median speed) are within 25% of the measured step-time difference."""
import os
import statistics

import pytest

from distributed import run_distributed
from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.train.stragglers import find_stragglers

STEPS, INTERVAL = 8, 2


def _train(rank, world, slow, out):
    from trident.train.trainer import Trainer

    os.environ["TRIDENT_INJECT"] = slow
    config = tiny_config("parallel.pp=2", "parallel.dp=2", f"train.steps={STEPS}", "train.global_batch_size=16",
                         f"diagnostics.straggler_interval={INTERVAL}")
    logs = []
    records = Trainer(config, out, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=logs.append).train()
    return records, logs


@pytest.mark.timeout(120)
def test_a_slow_rank_is_named_and_its_cost_estimated(tmp_path):
    healthy = run_distributed(_train, 4, "", str(tmp_path / "a"), timeout=100)[0][0]
    slowed, logs = run_distributed(_train, 4, "rank=0,step=1,kind=slow:0.2", str(tmp_path / "b"), timeout=100)[0]
    measured = (statistics.median(r["step_time_s"] for r in slowed[2:])
                - statistics.median(r["step_time_s"] for r in healthy[2:]))
    checks = [r for r in slowed if r["step"] % INTERVAL == 0]
    assert len(checks) == STEPS // INTERVAL
    estimates = []
    for record in checks:
        named = {s["rank"]: s for s in record["stragglers"]}
        assert named[0]["section"] == "forward" and named[0]["slower_by"] > 1.0
        estimates.append(named[0]["seconds_lost_per_step"])
    assert statistics.median(estimates) == pytest.approx(measured, rel=0.25), (estimates, measured)
    assert any(line.startswith("straggler at step 2: rank 0, forward") for line in logs)
    assert checks[-1]["straggler_seconds_lost"] == sum(s["seconds_lost_per_step"] for s in checks[-1]["stragglers"])


def test_one_stage_stragglers_cost_the_gap_to_the_slowest_peer():
    reports = [{"rank": r, "dp_rank": r, "pp_rank": 0, "tp_rank": 0, "compute": c, "dp_reduction": 0.0,
                "optimizer": 0.0} for r, c in enumerate([1.0, 1.05, 2.0, 0.98])]
    (found,) = find_stragglers(reports, pct=10)
    assert found["rank"] == 2 and found["section"] == "compute"
    assert found["slower_by"] == pytest.approx(2.0 / 1.0 - 1)  # against the median of its peers
    assert found["seconds_lost_per_step"] == pytest.approx(2.0 - 1.05)  # the step then ends with rank 1


def test_a_slow_tp_rank_is_named_once_for_its_group():
    # dp 2 x tp 2: rank 1 is slow; rank 0, its TP partner, waits for it inside every layer and looks slow too
    computes = {0: 1.8, 1: 2.0, 2: 1.0, 3: 1.02}
    reports = [{"rank": r, "dp_rank": r // 2, "pp_rank": 0, "tp_rank": r % 2, "compute": c, "dp_reduction": 0.0,
                "optimizer": 0.0} for r, c in computes.items()]
    (found,) = find_stragglers(reports, pct=10)
    assert found["rank"] == 1 and found["slower_by"] == pytest.approx(2.0 / 1.02 - 1)
    assert found["seconds_lost_per_step"] == pytest.approx(2.0 - 1.02)
