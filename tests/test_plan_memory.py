"""The planner's memory model: the formulas scale the way the program does, and match the schedules."""
from dataclasses import replace

import pytest

from trident.config import load_config
from trident.parallel.pipeline.overlap import schedule_for
from trident.parallel.pipeline.schedules import peak_inflight
from trident.plan.memory import (Layout, in_flight, layer_activation_bytes, layer_params, memory_per_gpu,
                                 stage_layers, stage_params)


def gpt(**model):
    overrides = [f"model.{k}={v}" for k, v in {"vocab_size": 1000, **model}.items()]
    return load_config("tiny", overrides)


def test_layer_params_add_up_to_the_model_size():
    config = load_config("mtnlg-530b")
    layout = Layout(tp=1, pp=1, dp=1, micro_batch=1)
    total = stage_params(config, layout, 0)
    # 12 L h^2 + 13 L h + (V + s) h + 2h: the standard GPT count; MT-NLG is "530B".
    m = config.model
    h, L = m.hidden_size, m.num_layers
    assert total == 12 * L * h * h + 13 * L * h + (m.padded_vocab_size(1) + m.seq_length) * h + 2 * h
    assert 525e9 < total < 535e9


def test_tensor_parallel_splits_the_matrices_but_not_the_layernorms():
    config = gpt(hidden_size=64, num_heads=4)
    one, four = layer_params(config, 1), layer_params(config, 4)
    h = 64
    replicated = 6 * h  # two LayerNorms (4h) and two row-parallel biases (2h)
    assert four == pytest.approx((one - replicated) / 4 + replicated)


def test_zero1_divides_optimizer_state_by_dp():
    config = load_config("mtnlg-530b")
    for dp in (2, 8, 16):
        plain = memory_per_gpu(config, Layout(tp=8, pp=35, dp=dp, micro_batch=1, checkpointing="full"))
        zero = memory_per_gpu(config, replace(plain_layout := Layout(tp=8, pp=35, dp=dp, micro_batch=1,
                                                                     checkpointing="full"), zero_stage=1))
        assert zero.optimizer == pytest.approx(plain.optimizer / dp)
        assert plain.optimizer == pytest.approx(12 * plain.params)  # fp32 master + m + v with bf16
        assert zero.weights == plain.weights and plain_layout.zero_stage == 0


def test_each_zero_stage_divides_one_more_kind_of_state_by_dp():
    """Stage 1 the optimizer state, stage 2 the gradients too, stage 3 the weights too (530B, TP8 x PP35)."""
    config = load_config("mtnlg-530b")
    for dp in (2, 8):
        layout = Layout(tp=8, pp=35, dp=dp, micro_batch=1, checkpointing="full", grad_dtype="fp32")
        plain = memory_per_gpu(config, layout)
        for stage in (1, 2, 3):
            zero = memory_per_gpu(config, replace(layout, zero_stage=stage))
            assert zero.optimizer == pytest.approx(plain.optimizer / dp)
            assert zero.gradients == pytest.approx(plain.gradients / (dp if stage >= 2 else 1))
            assert zero.weights == pytest.approx(plain.weights / (dp if stage == 3 else 1))
            assert (zero.gathered > 0) == (stage == 3) and (zero.staging > 0) == (stage >= 2)
    one = Layout(tp=8, pp=35, dp=1, micro_batch=1, zero_stage=3)  # one replica: nothing to shard
    assert memory_per_gpu(config, one).weights == memory_per_gpu(config, replace(one, zero_stage=0)).weights


def test_the_planners_tensors_of_a_layer_add_up_to_its_parameter_count():
    from trident.plan.zero_buffers import layer_tensors

    for preset, extra in (("mtnlg-530b", []), ("llama-7b", ["model.num_kv_heads=8"]), ("llama-7b", [])):
        config = load_config(preset, extra)
        for tp in (1, 2, 8):
            assert sum(layer_tensors(config, tp)) == pytest.approx(layer_params(config, tp)), (preset, extra, tp)


def test_activations_are_linear_in_micro_batch():
    config = gpt(num_layers=4, hidden_size=64, num_heads=4, seq_length=128)
    config.train.global_batch_size = 64
    per = {}
    for micro in (1, 2, 4):
        layout = Layout(tp=1, pp=1, dp=1, micro_batch=micro)
        per[micro] = memory_per_gpu(config, layout).activations
    assert per[2] == pytest.approx(2 * per[1])
    assert per[4] == pytest.approx(4 * per[1])


@pytest.mark.parametrize("sp", [False, True])
def test_checkpointing_orders_memory_none_above_selective_above_full(sp):
    config = load_config("mtnlg-530b")
    layout = Layout(tp=8, pp=35, dp=8, micro_batch=1, zero_stage=1, sequence_parallel=sp)
    acts = {mode: memory_per_gpu(config, replace(layout, checkpointing=mode)).activations
            for mode in ("none", "selective", "full")}
    assert acts["none"] > acts["selective"] > acts["full"]


def test_korthikanti_formula_with_dropout_in_bf16():
    # Korthikanti et al. 2022, eq. (2)/(4)/(5): per layer, bytes = sbh (10 + 24/t + 5as/(ht)) with TP,
    # sbh/t (34 + 5as/h) with TP + SP, and 34/t sbh for selective recompute with SP.
    config = load_config("mtnlg-530b", ["model.hidden_dropout=0.1", "model.attention_dropout=0.1"])
    m = config.model
    s, h, a, t = m.seq_length, m.hidden_size, m.num_heads, 8
    sbh = s * h
    tp_only = Layout(tp=t, pp=1, dp=1, micro_batch=1)
    with_sp = replace(tp_only, sequence_parallel=True)
    assert layer_activation_bytes(config, tp_only, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert layer_activation_bytes(config, with_sp, "none") == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert layer_activation_bytes(config, with_sp, "selective") == pytest.approx(sbh * 34 / t)
    assert layer_activation_bytes(config, tp_only, "full") == pytest.approx(2 * sbh)
    assert layer_activation_bytes(config, with_sp, "full") == pytest.approx(2 * sbh / t)
    # Flash attention keeps no s x s scores: the quadratic term is gone.
    flash = layer_activation_bytes(config, tp_only, "none", flash_attention=True)
    assert flash < layer_activation_bytes(config, tp_only, "selective") + 4 * a * s


@pytest.mark.parametrize("schedule,pp,micro,v", [("1f1b", 4, 8, 1), ("1f1b", 4, 2, 1), ("gpipe", 3, 5, 1),
                                                  ("interleaved", 4, 8, 2), ("interleaved", 2, 4, 3),
                                                  ("zb-h1", 4, 8, 1), ("zb-h2", 4, 8, 1), ("zb-h2", 4, 3, 1)])
def test_in_flight_matches_the_real_schedule(schedule, pp, micro, v):
    layout = Layout(tp=1, pp=pp, dp=1, micro_batch=1, virtual_stages=v, schedule=schedule)
    for contract in ("batched", "overlapped"):  # the lists NCCL runs, and gloo (and a rehearsal)
        peaks = peak_inflight(schedule_for(schedule, pp, micro, v, contract))
        for stage in range(pp):
            assert in_flight(layout, stage, micro, contract) == pytest.approx(peaks[stage] / v), (contract, stage)


def test_uneven_partition_puts_the_extra_layers_first():
    config = load_config("mtnlg-530b")
    assert stage_layers(config, Layout(tp=8, pp=35, dp=8, micro_batch=1)) == (3,) * 35
    layers = stage_layers(config, Layout(tp=8, pp=28, dp=10, micro_batch=1))
    assert sum(layers) == 105 and max(layers) == 4 and layers[0] == 4 and layers[-1] == 3
    interleaved = stage_layers(config, Layout(tp=8, pp=5, dp=8, micro_batch=1, virtual_stages=3,
                                              schedule="interleaved"))
    assert interleaved == (21,) * 5


def test_paper_layout_fits_80gb_and_full_checkpointing_is_what_makes_no_sp_safe():
    config = load_config("mtnlg-530b")
    layout = Layout.from_config(config, 2240)
    assert (layout.tp, layout.pp, layout.dp, layout.checkpointing, layout.zero_stage) == (8, 35, 8, "full", 1)
    memory = memory_per_gpu(config, layout)
    assert memory.total < 77 * 2**30  # 80 GiB less the profile's 3 GiB reserve
    assert memory.stage == 0 and memory.in_flight == 35  # 1F1B: stage 0 holds pp micro-batches
    # Without ZeRO-1 the optimizer alone would take ~23 GiB of the 80.
    assert memory.optimizer_unsharded == pytest.approx(8 * memory.optimizer)


def test_bytes_per_parameter_by_precision_and_gradient_dtype():
    config = load_config("mtnlg-530b")
    layout = Layout(tp=8, pp=35, dp=8, micro_batch=1, checkpointing="full")
    per_param = lambda mem: (mem.weights + mem.gradients + mem.optimizer) / mem.params  # noqa: E731
    assert per_param(memory_per_gpu(config, layout)) == pytest.approx(16)  # docs/reference.md: 2 + 2 + 4 + 4 + 4
    assert per_param(memory_per_gpu(config, replace(layout, grad_dtype="fp32"))) == pytest.approx(18)
    fp32 = load_config("mtnlg-530b", ["train.precision=fp32"])
    assert per_param(memory_per_gpu(fp32, layout)) == pytest.approx(16)  # 4 + 4 + m, v; no separate master


@pytest.mark.parametrize("overrides,gpus", [
    (["parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true", "parallel.zero_stage=1"], 8),
    (["parallel.pp=4", "parallel.schedule=interleaved", "parallel.virtual_stages=2"], 4),
    (["parallel.pp=2", "parallel.layer_partition=[3,5]", "parallel.zero_stage=1"], 2),
    (["parallel.tp=1", "parallel.sequence_parallel=true", "parallel.zero_stage=1"], 1)])
def test_the_planner_derives_what_each_rank_layout_has(overrides, gpus):
    """Sequence split, ZeRO in effect and every stage's layers: the planner's candidate and the
    trainer's RankLayout read them from the same rules (parallel/layout_rules.py)."""
    from trident.config import load_config
    from trident.parallel.layout import rank_layout
    from trident.parallel.mesh import Mesh
    from trident.plan.memory import Layout, stage_layers

    config = load_config("tiny", ["model.num_layers=8", *overrides]).validate(gpus)
    planned = Layout.from_config(config, gpus)
    p = config.parallel
    for rank in range(gpus):
        actual = rank_layout(config, Mesh(dp=gpus // (p.tp * p.pp), pp=p.pp, tp=p.tp, rank=rank))
        assert (planned.sequence_split, planned.zero) == (actual.sequence_split, actual.zero)
        layers = sum(len(chunk) for chunk in actual.chunk_layers)
        assert stage_layers(config, planned)[actual.pp_rank] == layers
