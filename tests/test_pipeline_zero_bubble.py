"""Zero-bubble ZB-H1 and ZB-H2: the schedules (checked, deadlock-free, at their bounds: ZB-H1's
m(f+B+W) + (p-1)(f+B-W) at pp = 2, ZB-H2's m(f+B+W) + (p-1)f at every pp), their memory (1F1B's and
pp - 1 more, freed at the weight gradients), transfers paired for batched exchanges, and the
deferred weight gradients of the linear layers (the same numbers as a plain backward, every
accumulation hook firing once, with a gradient). Equivalence with one process:
tests/test_pipeline_parallel.py."""
import pytest
import torch
import torch.nn.functional as F

from trident.parallel.pipeline.overlap import CONTRACTS, last_backwards, schedule_for
from trident.parallel.pipeline.schedules import Backward, BackwardWeight, ScheduleError, forward_only, peak_inflight
from trident.parallel.pipeline.simulate import check_schedule, simulate
from trident.parallel.pipeline.zero_bubble import (ZERO_BUBBLE_SCHEDULES, _list_schedule, list_scheduled, zero_bubble,
                                                   zero_bubble_theory)
from trident.parallel.weight_grad import deferring_weight_grads, flush, linear


@pytest.mark.parametrize("name", ZERO_BUBBLE_SCHEDULES)
@pytest.mark.parametrize("contract", CONTRACTS)
def test_every_layout_is_valid_and_never_slower_than_1f1b(contract, name):
    for pp in (2, 3, 4):
        for m in range(1, 13):
            schedule = schedule_for(name, pp, m, 1, contract)
            check_schedule(schedule)
            check_schedule(forward_only(schedule), backward=False)
            for ops in schedule:  # each micro-batch: forward, then its backward, then its weight gradients
                assert sum(isinstance(op, BackwardWeight) for op in ops) == m
            zb = simulate(schedule, 1.0, 2.0, contract=contract)
            ofob = simulate(schedule_for("1f1b", pp, m, 1, contract), 1.0, 2.0, contract=contract)
            assert zb.makespan <= ofob.makespan, (pp, m)


@pytest.mark.parametrize("costs", [(1.0, 1.0, 1.0, 0.05), (1.0, 1.4, 0.6, 0.1), (55.0, 75.0, 36.0, 2.0)])
def test_batched_exchanges_pair_up_and_beat_1f1b(costs):
    # NCCL's contract: a send is done only once its receive is posted. Placed by time, ZB-H1's transfers
    # meet their receives at once, so it beats 1F1B also with uneven costs (the last: this CPU's f, B,
    # W in ms) and paid messages; placed before the consumer as in 1F1B, it lost 4-16% to 1F1B.
    f, b, w, comm = costs
    for pp in (2, 4, 8):
        for m in (pp, 2 * pp, 16):
            run = {name: simulate(schedule_for(name, pp, m, 1, "batched"), f, b + w, comm_time=comm,
                                  contract="batched", weight_fraction=w / (b + w)) for name in ("1f1b", "zb-h1")}
            assert run["zb-h1"].makespan < run["1f1b"].makespan, (pp, m)


def test_batched_exchanges_lose_nothing_to_pairing_with_free_messages():
    # Each receive sits in the gap of the peer's list spanning the moment its send is posted, so with
    # unit costs and free messages no batched exchange waits for its peer: the step takes exactly the
    # time of the list-scheduling pass (ZB-H1's memory and ZB-H2's).
    for pp in (2, 3, 4, 8):
        for m in (1, pp, 2 * pp + 1):
            for extra in (0, pp - 1):
                _, spans = _list_schedule(pp, m, extra)
                batched = simulate(list_scheduled(pp, m, extra), 1.0, 2.0, contract="batched")
                assert batched.makespan == max(end for stage in spans for _, end in stage), (pp, m, extra)


def test_two_stages_reach_the_zero_bubble_bound():
    # m (f + B + W) + (pp - 1)(f + B - W) with f = B = W = 1: bubble (pp - 1) / (3 m).
    for m in range(2, 13):
        timeline = simulate(schedule_for("zb-h1", 2, m, 1, "overlapped"), 1.0, 2.0)
        assert timeline.makespan == pytest.approx(3 * m + 1)
        assert timeline.bubble_fraction == pytest.approx(zero_bubble_theory(2, m))
    four = simulate(schedule_for("zb-h1", 4, 8, 1, "overlapped"), 1.0, 2.0).makespan
    assert 3 * 8 + 3 <= four < (8 + 3) * 3  # between the bound (27) and 1F1B (33)


@pytest.mark.parametrize("contract", CONTRACTS)
def test_zb_h2_reaches_its_bound_at_every_depth(contract):
    # Holding pp - 1 micro-batches more, every stage fills the drain: only the first forwards' fill
    # is left, m (f + B + W) + (pp - 1) f; ZB-H1 gets there at pp = 2 only.
    slack = 1 if contract == "overlapped" else 0
    for pp in range(2, 9):
        for m in range(pp, 17):
            schedule = schedule_for("zb-h2", pp, m, 1, contract)
            assert simulate(schedule, 1.0, 2.0, contract=contract).makespan == 3 * m + pp - 1, (pp, m)
            assert peak_inflight(schedule) == [min(2 * pp - 1 - s + slack, m) for s in range(pp)]
    h1 = simulate(schedule_for("zb-h1", 4, 8, 1, "overlapped"), 1.0, 2.0).makespan
    assert h1 > 3 * 8 + 3
    with pytest.raises(ScheduleError, match="unknown zero-bubble schedule 'zb-v'"):
        zero_bubble("zb-v", 2, 4, 1)
    with pytest.raises(ScheduleError, match="slack must be a non-negative integer"):
        zero_bubble("zb-h2", 4, 8, -1)


def test_zb_h2_gains_most_with_this_cpus_costs():
    # f : B : W = 55 : 75 : 36 ms (this CPU, 4-layer model, pp 2): the bound's gain over 1F1B is
    # (m + 1)(f + B + W) / (m (f + B + W) + f); ZB-H1 stops short of it.
    f, b, w = 55.0, 75.0, 36.0
    ofob = simulate(schedule_for("1f1b", 2, 4, 1, "overlapped"), f, b + w).makespan
    gain = {name: ofob / simulate(schedule_for(name, 2, 4, 1, "overlapped"), f, b + w,
                                  weight_fraction=w / (b + w)).makespan for name in ZERO_BUBBLE_SCHEDULES}
    assert gain["zb-h1"] == pytest.approx(5 * 166 / (4 * 166 + 55 + 75 - 36), rel=1e-3)
    assert gain["zb-h2"] > 1.14 > gain["zb-h1"] + 0.04


def test_memory_is_one_micro_batch_more_than_1f1b_and_freed_at_the_weight_gradients():
    for pp, m in [(2, 4), (4, 8), (4, 2)]:
        assert peak_inflight(list_scheduled(pp, m, extra_inflight=1)) == [min(pp - s + 1, m) for s in range(pp)]
        assert peak_inflight(list_scheduled(pp, m, extra_inflight=0)) == [min(pp - s, m) for s in range(pp)]
    ops = list_scheduled(2, 4)[0]
    assert last_backwards(ops)[0] == max(i for i, op in enumerate(ops) if isinstance(op, (Backward, BackwardWeight)))
    with pytest.raises(ScheduleError, match="extra_inflight"):
        list_scheduled(2, 4, extra_inflight=-1)
    with pytest.raises(ScheduleError, match="needs schedule 'interleaved'"):
        schedule_for("zb-h1", 2, 4, 2, "overlapped")


def _grads(deferred: bool, autocast: bool):
    torch.manual_seed(0)
    x = torch.randn(5, 3, 8, requires_grad=True)
    weight, bias = torch.randn(6, 8, requires_grad=True), torch.randn(6, requires_grad=True)
    fired = []
    weight.register_post_accumulate_grad_hook(lambda p: fired.append(p.grad is not None))
    queue: list = []
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), deferring_weight_grads(queue):
        y = linear(x, weight, bias) if deferred else F.linear(x, weight, bias)
    (y.float() ** 2).sum().backward()
    before_flush = weight.grad
    flush(queue)
    return x.grad, weight.grad, bias.grad, before_flush, fired


@pytest.mark.parametrize("autocast", [False, True])
def test_deferred_weight_gradients_equal_a_plain_backward(autocast):
    x_ref, w_ref, b_ref, _, fired_ref = _grads(deferred=False, autocast=autocast)
    x_grad, w_grad, b_grad, before_flush, fired = _grads(deferred=True, autocast=autocast)
    assert before_flush is None  # the backward left the weight alone ...
    assert torch.equal(x_grad, x_ref) and torch.equal(w_grad, w_ref)  # ... flush computed the same GEMM
    torch.testing.assert_close(b_grad, b_ref)
    assert fired == fired_ref == [True]  # one accumulation, with a gradient, as trident's hooks expect


@pytest.mark.parametrize("name", ZERO_BUBBLE_SCHEDULES)
def test_zero_bubble_refuses_full_activation_checkpointing(name):
    from train_fixtures import tiny_config
    from trident.config import ConfigError

    with pytest.raises(ConfigError, match=f"train.activation_checkpointing.*schedule={name}"):
        tiny_config("parallel.pp=2", f"parallel.schedule={name}", "train.activation_checkpointing=full").validate(2)


def test_cli_draws_the_weight_gradient_boxes(tmp_path, capsys):
    import json

    from trident.cli import main
    from trident.parallel.pipeline.timeline import Timeline

    saved = tmp_path / "zb.json"
    assert main(["pipeline-diagram", "--pp", "2", "--micro-batches", "4", "--schedule", "zb-h1", "--json",
                 "--out", str(tmp_path / "zb.png"), "--save-timeline", str(saved)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["theoretical_bubble"] == pytest.approx(1 / 12) == report["bubble_fraction"]
    assert report["peak_inflight_activations"] == [3, 2]
    assert sum(b.kind == "weight" for b in Timeline.load(saved).compute_boxes) == 8
    assert main(["pipeline-diagram", "--pp", "4", "--micro-batches", "8", "--schedule", "zb-h2", "--json",
                 "--out", str(tmp_path / "h2.png")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bubble_fraction"] == pytest.approx(report["theoretical_bubble"]) == pytest.approx(3 / 24)
    assert report["peak_inflight_activations"] == [8, 7, 6, 5]
    # Uneven halves (this CPU's B : W = 75 : 36) and NCCL's batched messages; a fraction outside (0, 1): exit 2.
    assert main(["pipeline-diagram", "--pp", "2", "--micro-batches", "8", "--schedule", "zb-h2", "--messages",
                 "batched", "--forward-time", "55", "--backward-time", "111", "--weight-fraction", "0.3243",
                 "--json", "--out", str(tmp_path / "h2b.png")]) == 0
    ofob = 9 * 166
    assert ofob / json.loads(capsys.readouterr().out)["makespan"] == pytest.approx(0.924, abs=0.005)  # docs/pipeline.md
    assert main(["pipeline-diagram", "--schedule", "zb-h1", "--weight-fraction", "1", "--out",
                 str(tmp_path / "bad.png")]) == 2
    assert "weight_fraction must be between 0 and 1" in capsys.readouterr().out
