"""Stragglers. Real processes on a busy host (a busy-loop process beside 4 gloo ranks on 2 cores): a
rank slowed by an injected slow forward in pp2 x dp2 is named, alone, with its section and the
seconds it costs each step (a replay of the measured step through the pipeline simulator with that
rank at its peers' median speed, within 25% of the injected delay); the same run without the
injection names nobody. The naming rule (slow beyond the noise band at a material cost,
at straggler_checks checks in a row) on timing series recorded from such runs and on made-up ones."""
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from distributed import run_distributed
from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.config import DiagnosticsConfig
from trident.train.straggler_watch import HISTORY, StragglerWatch
from trident.train.stragglers import find_stragglers

STEPS, INTERVAL = 10, 1  # 10 checks: the rule can name a rank from the 4th (its noise band needs 4), 7 chances
SLOW, MICRO_BATCHES = 0.1, 2  # seconds added to each forward of rank 3; forwards a step (global batch 8)
RECORDED = Path(__file__).parent / "fixtures" / "stragglers" / "pp2_dp2_busy_host.json"


def _train_twice(rank, world, slow, out):
    """Two runs in one process group (one start-up): without an injection, then with `slow`."""
    from trident.train.trainer import Trainer

    config = tiny_config("parallel.pp=2", "parallel.dp=2", f"train.steps={STEPS}", "train.global_batch_size=8",
                         "train.peak_tflops=1",  # no CPU peak measured at start: 0.6 s a rank
                         f"diagnostics.straggler_interval={INTERVAL}")
    runs = []
    for name, inject in (("healthy", ""), ("slowed", slow)):
        os.environ["TRIDENT_INJECT"] = inject
        logs = []
        records = Trainer(config, f"{out}/{name}", datasets=(RandomTokens(32), None), vocab_size=VOCAB,
                          log=logs.append).train()
        runs.append((records, logs))
    return runs


@pytest.fixture
def busy_core():
    """A process spinning on one core for the test's duration: the ranks' timings get a busy host's noise."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait(timeout=10)


def _named(records):
    return [[s["rank"] for s in r["stragglers"]] for r in records if r["step"] % INTERVAL == 0]


@pytest.mark.timeout(150)
def test_only_the_slowed_rank_is_named_and_its_cost_estimated_on_a_busy_host(tmp_path, busy_core):
    (healthy, _), (slowed, logs) = run_distributed(_train_twice, 4, f"rank=3,step=1,kind=slow:{SLOW}",
                                                   str(tmp_path), timeout=120)[0]
    # the same checks that name nobody in the healthy run name rank 3 at each of its last 7 in the slowed one:
    # the noise band needs 4 checks of the peer's times (dp 2: one peer); from then on rank 3 alone
    assert _named(healthy) == [[]] * (STEPS // INTERVAL)
    assert _named(slowed) == [[]] * 3 + [[3]] * (STEPS // INTERVAL - 3)
    named = [r["stragglers"][0] for r in slowed if r["step"] % INTERVAL == 0 and r["stragglers"]]
    assert [s["slow_checks"] for s in named] == list(range(4, STEPS // INTERVAL + 1))
    assert all(s["section"] == "forward" and s["slower_by"] > 1.0 for s in named)
    # both slowed forwards lie on the last stage's critical path (the measured step-time difference is
    # no yardstick on a busy host: the sleeping rank leaves its core to the others)
    estimate = statistics.median(s["seconds_lost_per_step"] for s in named)
    assert estimate == pytest.approx(SLOW * MICRO_BATCHES, rel=0.25), named
    assert any(line.startswith("straggler at step 8: rank 3, forward") for line in logs)
    assert slowed[-1]["straggler_seconds_lost"] == named[-1]["seconds_lost_per_step"]


def _default_watch() -> StragglerWatch:
    cfg = DiagnosticsConfig()
    return StragglerWatch(cfg.straggler_pct, cfg.straggler_checks, cfg.straggler_min_cost_pct)


def _watch_recorded(series: list[dict]) -> list[list[dict]]:
    watch = _default_watch()
    return [watch.observe(c["reports"], c["step_seconds"], c["micro_batches"]) for c in series]


def test_a_busy_hosts_noise_names_nobody_though_each_check_alone_would():
    for noise in json.loads(RECORDED.read_text())["noise"]:  # five runs of 20 checks
        assert _watch_recorded(noise) == [[]] * len(noise)
        alone = [{f["rank"] for f in find_stragglers(c["reports"], 10, micro_batches=c["micro_batches"])}
                 for c in noise]
        assert sum(map(bool, alone)) >= len(noise) * 3 // 4  # the one-check rule names a healthy rank


def test_a_recorded_slow_rank_is_named_from_the_check_its_noise_band_is_known():
    slowed = json.loads(RECORDED.read_text())["slowed"]  # rank 3 slowed by 0.02 s a forward
    named = _watch_recorded(slowed)
    assert [[s["rank"] for s in n] for n in named] == [[]] * 3 + [[3]] * (len(slowed) - 3)
    assert [n[0]["slow_checks"] for n in named[3:]] == list(range(4, len(slowed) + 1))


def _one_stage(computes: list[float]) -> list[dict]:
    return [{"rank": r, "dp_rank": r, "pp_rank": 0, "tp_rank": 0, "compute": c, "dp_reduction": 0.0,
             "optimizer": 0.0} for r, c in enumerate(computes)]


PEER = [1.0, 1.4, 0.8, 1.2, 1.0, 1.4, 0.8, 1.2]  # rank 0's compute at 8 checks: a robust sigma of 0.3 s


@pytest.mark.parametrize("extra, named_from", [(0.5, None), (2.0, 3)])
def test_a_rank_is_named_only_beyond_five_sigmas_of_its_peers_history(extra, named_from):
    watch = _default_watch()
    named = [watch.observe(_one_stage([peer, peer + extra]), step_seconds=4.0) for peer in PEER]
    assert [bool(n) for n in named] == [named_from is not None and i >= named_from for i in range(len(PEER))]


RAMP = [1, 6, 11, 16, 21, 26, 31, 36, 41, 46, 51, 56, 60]  # micro-batches a step: MT-NLG's 32 -> 1920 in 32s
JITTER = [1.0, 1.04, 0.97, 1.02, 0.99, 1.03]  # the healthy peer's seconds per micro-batch, x 0.05


@pytest.mark.parametrize("slow", [1.3, 1.0])
def test_a_batch_size_ramp_does_not_hide_a_slowed_rank(slow):
    # dp 2, one stage: rank 1 is `slow` x slower per micro-batch while the batch grows 60-fold; raw step
    # times would put the peer's noise band over the whole ramp (seconds wide) and name nobody
    watch, named = _default_watch(), []
    for i, m in enumerate(RAMP):
        peer = 0.05 * JITTER[i % len(JITTER)] * m
        named.append(watch.observe(_one_stage([peer, 0.05 * slow * m]), step_seconds=0.05 * max(slow, 1.04) * m,
                                   micro_batches=m))
    expected = [[1] if slow > 1 and i >= 3 else [] for i in range(len(RAMP))]
    assert [[n["rank"] for n in found] for found in named] == expected
    if slow > 1:
        assert [found[0]["slow_checks"] for found in named[3:]] == [min(i, HISTORY) for i in range(4, len(RAMP) + 1)]
        assert watch.peer_noise(1) < 0.05 * 0.05  # a band of a few ms a micro-batch, not of the ramp


@pytest.mark.parametrize("step_seconds, named", [(1.5, True), (5.0, False)])
def test_a_rank_is_named_only_when_it_costs_the_step_enough(step_seconds, named):
    watch = _default_watch()  # 0.2 s of a 1.5 s step: 13%; of a 5 s step: 4% (< 5%)
    found = [watch.observe(_one_stage([1.0 + i / 1000, 1.2]), step_seconds) for i in range(5)]
    assert bool(found[-1]) == named
    if named:
        assert found[-1][0]["seconds_lost_per_step"] == pytest.approx(0.2 - 0.004)


def test_a_rank_is_named_only_after_straggler_checks_slow_checks_in_a_row():
    watch = _default_watch()  # straggler_checks = 4
    slow = [True, True, True, False, True, True, True, True]
    named = [watch.observe(_one_stage([1.0, 2.0 if s else 1.0]), step_seconds=3.0) for s in slow]
    # the gap at the fourth check resets the streak: named only at the fourth slow check after it
    assert [[n["slow_checks"] for n in found] for found in named] == [[]] * 7 + [[4]]


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
