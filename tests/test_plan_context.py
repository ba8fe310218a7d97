"""trident plan with context parallelism (parallel.cp) and hybrid sharding (parallel.dp_shard): the
formulas against hand computations, the search over both, and what it says about 32k-token sequences."""
import json
from dataclasses import replace

import pytest

from trident.config import load_config
from trident.hardware import load_hardware
from trident.parallel.layout_rules import dp_bytes_per_step
from trident.plan import trainer_activations as acts
from trident.plan.memory import Layout, memory_per_gpu, stage_memory
from trident.plan.report import context_summary
from trident.plan.ring import ring_cost
from trident.plan.search import candidate_layouts, evaluate, rank_layouts
from trident.plan.time import gradient_sync_seconds, step_time
from trident.rehearse.run import rehearse

GIB = 2**30


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-80gb")


@pytest.fixture(scope="module")
def llama():
    return load_config("llama-7b")  # 32 layers, h 4096, 32 heads of 128, seq 4096, bf16


def test_ring_traffic_and_its_overlap_by_hand(llama):
    layout = Layout(tp=2, pp=1, dp=1, cp=4, micro_batch=1)
    k = 1 * (4096 // 4) * (32 // 2) * 128  # |K|: b x S/cp tokens x heads a TP rank x head size
    forward, backward = (4 - 1) * 2 * k * 2, (4 - 1) * 2 * k * 2 + 4 * 2 * k * 4
    c = 4096 / 8  # chunk length: 2 cp chunks
    step = 4 * 1 * 32 * 128 / 2 * 2 * c * c  # a step's QK^T and PV over 2c^2 scores a head
    cost = ring_cost(llama, layout, 2, speed_flops=1e12, busbw_gbs=1.0, latency_us=0.0)
    exposed = 3 * (forward / 3 / 1e9 - step / 1e12) + 4 * (backward / 4 / 1e9 - 2 * step / 1e12)
    assert (cost.forward_bytes, cost.backward_bytes) == (forward, backward)
    assert cost.exposed_s == pytest.approx(exposed, rel=1e-12)
    # a fast enough link hides every exchange behind its block; recompute runs the forward ring twice
    assert ring_cost(llama, layout, 2, 1e12, 1e6, 0.0).exposed_s == 0.0
    again = ring_cost(llama, replace(layout, checkpointing="full"), 2, 1e12, 1.0, 0.0)
    assert again.forward_bytes == 2 * forward and again.exposed_s == pytest.approx(exposed + 3 * (forward / 3e9 - step / 1e12))
    assert ring_cost(llama, replace(layout, cp=1), 2, 1e12, 1.0, 0.0).exposed_s == 0.0


def test_a_cp_rank_keeps_the_activations_of_its_s_over_cp_tokens(llama):
    half = load_config("llama-7b", ["model.seq_length=2048"])
    for mode in ("none", "selective", "full"):
        at_cp2 = acts.layer_bytes(llama, acts.shape(llama, Layout(1, 1, 1, 1, cp=2), "cuda"), mode)
        assert at_cp2 == acts.layer_bytes(half, acts.shape(half, Layout(1, 1, 1, 1), "cuda"), mode)
    one, two = (stage_memory(llama, Layout(1, 1, 1, 1, checkpointing="none", cp=cp), 0, True) for cp in (1, 2))
    assert 0.45 < two.activations / one.activations < 0.55  # half, less the ring's buffers' share


def test_ring_backward_working_set_by_hand(llama):
    x = acts.shape(llama, Layout(tp=2, pp=1, dp=1, cp=4, micro_batch=1), "cuda")
    s, h = 4096 // 4, 4096
    block16, block32 = 2 * 2 * s * h / 2, 2 * 4 * s * h / 2  # K and V of a TP rank's 16 heads, bf16 / fp32
    by_hand = 2 * block16 + 2 * block32 + block32 + 4 * 4 * s * h / 2  # ring, dK/dV, fp32 K/V, Q O dO dQ fp32
    assert acts.ring_working_set(x) == by_hand
    mlp = 2 * s * h + 2 * 2 * s * 11008 / 2 + 2 * h * 11008 / 2
    assert acts.backward_working_set(llama, x, "none") == max(mlp, 2 * s * h + by_hand)


def test_zero_shards_over_dp_x_cp_or_the_hybrid_group(llama):
    full = stage_memory(llama, Layout(1, 1, 1, 1, grad_dtype="fp32"), 0, True).optimizer
    for layout, k in [(Layout(1, 1, 4, 1, zero_stage=1, cp=2), 8), (Layout(1, 1, 4, 1, zero_stage=1, cp=2, dp_shard=2), 2),
                      (Layout(1, 1, 8, 1, zero_stage=3, dp_shard=4), 4)]:
        mem = stage_memory(llama, replace(layout, grad_dtype="fp32"), 0, True)
        assert mem.optimizer == pytest.approx(full / k)
        if layout.zero_stage == 3:
            assert mem.weights == pytest.approx(mem.params * 2 / k) and mem.gradients == pytest.approx(mem.params * 4 / k)


def test_cp1_and_dp_shard_dp_are_the_layout_without_them(llama, a100):
    for stage in (1, 2, 3):
        plain = Layout(tp=1, pp=1, dp=8, micro_batch=1, zero_stage=stage, grad_dtype="fp32")
        explicit = replace(plain, cp=1, dp_shard=8)
        assert memory_per_gpu(llama, plain, True).to_dict() == memory_per_gpu(llama, explicit, True).to_dict()
        assert step_time(llama, plain, a100, 8).to_dict() == step_time(llama, explicit, a100, 8).to_dict()
        # the data-parallel time is the one-group formula over dp (one latency per hop of each ring)
        params = round(memory_per_gpu(llama, plain, True).params)
        sent = dp_bytes_per_step(stage, 8, params, 2, 128, 4)
        rings = {1: 1, 2: 128, 3: 3 * 128}[stage]
        seconds = (sent / (a100.intra_node_busbw_gbs * 1e9) + rings * 7 * a100.intra_node_latency_us * 1e-6)
        assert gradient_sync_seconds(llama, explicit, a100, 8) == pytest.approx(seconds * (1 - a100.dp_overlap))


def test_hybrid_sharding_traffic_by_hand(llama, a100):
    layout = Layout(tp=1, pp=1, dp=16, micro_batch=1, zero_stage=1, grad_dtype="fp32", dp_shard=4)
    params = round(memory_per_gpu(llama, layout, True).params)
    inside = dp_bytes_per_step(1, 4, params, 2, 64, 4)  # reduce-scatter + all-gather in a node's group of 4
    across = 2 * 3 * (params // 4) * 4 // 4  # all-reduce of the owned quarter over 4 replicas
    assert inside + across == dp_bytes_per_step(1, 16, params, 2, 64, 4, shard=4)
    seconds = (inside / (a100.intra_node_busbw_gbs * 1e9) + 3 * a100.intra_node_latency_us * 1e-6
               + across / (a100.inter_node_busbw_gbs * 1e9) + 2 * 3 * a100.inter_node_latency_us * 1e-6)
    assert gradient_sync_seconds(llama, layout, a100, 8) == pytest.approx(seconds * (1 - a100.dp_overlap))
    flat = gradient_sync_seconds(llama, replace(layout, dp_shard=0), a100, 8)
    assert gradient_sync_seconds(llama, layout, a100, 8) < flat  # most bytes stay inside the node


def test_the_search_tries_cp_and_hybrid_shard_groups(a100):
    config = load_config("gpt-125m", ["model.vocab_size=50257", "model.seq_length=4096"])
    layouts = list(candidate_layouts(config, 16, gpus_per_node=8))
    assert {l.cp for l in layouts} == {1, 2, 4}  # 4096 tokens: at least 1024 a rank
    assert all(l.gpus == 16 and 4096 % (2 * l.cp) == 0 for l in layouts)
    hybrid = [l for l in layouts if l.replicas > 1]
    assert hybrid and all(l.zero_stage >= 1 and l.gradient_group % l.shard == 0 for l in hybrid)
    assert max(l.shard * l.tp for l in hybrid if l.cp == 1 and l.pp == 1) == 8  # groups inside a node of 8
    assert all(l.cp == 1 and l.replicas == 1 for l in candidate_layouts(config, 16, max_cp=1))


@pytest.fixture(scope="module")
def long_530b(a100):
    config = load_config("mtnlg-530b", ["model.seq_length=32768"])
    return config, rank_layouts(config, a100, gpus=560, gpus_per_node=8, flash_attention=True, grad_dtype="fp32",
                                hybrid=False)


def test_at_32k_tokens_the_530b_fits_an_80gb_gpu_only_with_cp(long_530b, a100):
    config, ranking = long_530b
    assert ranking.plans and all(p.layout.cp >= 2 and p.needs_cp for p in ranking.plans)
    assert all(p.memory.total <= 80 * GIB for p in ranking.plans)
    # cp = 1 layouts were costed and rejected for memory (at 2048 tokens the same search keeps them)
    twin = replace(ranking.plans[0].layout, cp=1, dp=ranking.plans[0].layout.gradient_group)
    assert evaluate(config, twin, a100, 560, 8, True).reasons[0].startswith("needs ")
    lines = context_summary(ranking)
    assert lines[0].startswith(f"{len(ranking.plans)} of {len(ranking.plans)} fitting layouts fit only with cp >= 2")
    assert "no layout fits without context parallelism" in lines


def test_at_2048_tokens_the_530b_fits_without_cp(a100):
    config = load_config("mtnlg-530b")
    plan = evaluate(config, Layout.from_config(config, 2240, "fp32"), a100, 2240, 8, True)
    assert plan.ok and not plan.needs_cp


@pytest.mark.timeout(180)
def test_a_cp_rank_of_the_530b_rehearses_within_10_percent_of_the_plan():
    # the 530B preset at 8192 tokens on tp8 x pp35 x cp4 (1,120 ranks); 8 sequences a step keep it fast
    config = load_config("mtnlg-530b", ["model.seq_length=8192", "parallel.cp=4", "train.global_batch_size=8",
                                        "train.rampup_batch_size=null"])
    config.validate(1120)
    result = rehearse(config, 1120, [0])["ranks"][0]
    measured, plan = result["measured"], result["plan"]
    assert result["coordinates"]["cp"] == 0 and result["micro_batches"] == 8
    for category in ("weights", "gradients", "optimizer", "activations", "buffers"):
        assert measured[category] == pytest.approx(plan[category], rel=0.10), category
    assert measured["peak"] == pytest.approx(plan["total"], rel=0.10)
    # the activations are those of 2048 tokens a rank: a quarter of what the same rank holds at cp = 1
    alone = stage_memory(config, replace(Layout.from_config(config, 1120, "fp32"), cp=1), 0, True, "cpu")
    assert measured["activations"] < 0.3 * (alone.activations + alone.logits + alone.p2p_buffers)


def test_launch_plans_and_passes_the_cp_layout(capsys):
    from trident.cli import main

    args = ["mtnlg-530b", "model.vocab_size=50257", "model.seq_length=32768", "parallel.tp=4", "parallel.cp=4"]
    assert main(["launch", *args, "--nodes", "280", "--gpus-per-node", "8", "--out", "run", "--dry-run"]) == 0
    script = capsys.readouterr().out
    assert "# Plan (a100-80gb): tp4 pp35 cp4 dp4 mb1 ckpt=full zero1;" in script  # 2,240 = 4 x 35 x 4 x 4
    assert "parallel.cp=4" in script.split("trident train", 1)[1]
    # without cp the same job does not fit: launch refuses it before writing a script
    assert main(["launch", *args[:-1], "--nodes", "280", "--gpus-per-node", "8", "--out", "run", "--dry-run"]) == 2
    assert "needs" in capsys.readouterr().err


def test_plan_says_when_a_layout_fits_only_with_cp(capsys):
    from trident.cli import main

    args = ["plan", "mtnlg-530b", "model.seq_length=32768", "parallel.tp=4", "parallel.cp=4", "--gpus", "2240"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "tp4 pp35 cp4 dp4" in out and "CP ring (exposed)" in out
    assert "fits only with cp >= 2: at cp=1 (dp=16) it does not fit" in out
    assert main(args + ["--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["needs_cp"] and plan["layout"]["cp"] == 4 and plan["time"]["cp_bytes"] > 0
