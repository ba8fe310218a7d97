"""The planner's step-time model against MT-NLG's published throughput (docs/reference.md), with the single
efficiency figure of the a100-80gb profile; and the accounting identities behind it."""
from dataclasses import replace

import pytest

from trident.config import load_config
from trident.plan.memory import Layout
from trident.flops import iteration_flops as formula_iteration_flops
from trident.hardware import load_hardware
from trident.plan.time import (calibrate_efficiency, head_forward_flops, iteration_flops, layer_forward_flops,
                               recompute_flops, ring_time, step_time)

# GPUs -> (seconds per iteration, TFLOP/s per GPU), Smith et al. 2022 on DGX A100-80GB.
PAPER = {2240: (60.1, 126.0), 2800: (50.2, 121.0), 3360: (44.4, 113.0)}


@pytest.fixture(scope="module")
def mtnlg():
    return load_config("mtnlg-530b")


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-80gb")


@pytest.mark.parametrize("gpus", sorted(PAPER))
def test_mtnlg_step_time_and_tflops_within_10_percent(mtnlg, a100, gpus):
    layout = Layout.from_config(mtnlg, gpus)
    assert layout.dp == gpus // 280
    predicted = step_time(mtnlg, layout, a100, gpus_per_node=8)
    seconds, tflops = PAPER[gpus]
    assert predicted.total == pytest.approx(seconds, rel=0.10)
    assert predicted.tflops_per_gpu == pytest.approx(tflops, rel=0.10)


def test_one_efficiency_figure_for_all_three_points(mtnlg, a100):
    # The profile's figure is the one calibrated on the 280-node point (docs/planner.md); the two
    # larger clusters are predictions: calibrating on each separately must not be needed.
    per_point = [calibrate_efficiency(mtnlg, Layout.from_config(mtnlg, g), a100, 8, PAPER[g][0]) for g in sorted(PAPER)]
    assert a100.sustained_efficiency == pytest.approx(per_point[0], abs=0.005)
    assert max(per_point) - min(per_point) < 0.05


def test_throughput_falls_with_data_parallel_size_as_the_bubble_grows(mtnlg, a100):
    times = [step_time(mtnlg, Layout.from_config(mtnlg, g), a100, 8) for g in sorted(PAPER)]
    assert times[0].tflops_per_gpu > times[1].tflops_per_gpu > times[2].tflops_per_gpu
    assert times[0].bubble_fraction < times[1].bubble_fraction < times[2].bubble_fraction
    # (pp - 1) / m for equal stages; the last stage's LM head makes it the slowest, so slightly less.
    assert times[0].bubble_fraction == pytest.approx(34 / 240, rel=0.08)


def test_per_component_flops_add_up_to_the_reference_formula(mtnlg):
    m, b = mtnlg.model, mtnlg.train.global_batch_size
    per_layer = 3 * layer_forward_flops(mtnlg, b) + recompute_flops(mtnlg, b, "full")
    total = m.num_layers * per_layer + 3 * head_forward_flops(mtnlg, b)
    assert total == pytest.approx(iteration_flops(mtnlg), rel=1e-12)
    expected = formula_iteration_flops(b, m.seq_length, m.num_layers, m.hidden_size, m.padded_vocab_size(1), True)
    assert iteration_flops(mtnlg) == pytest.approx(expected, rel=1e-12)


def test_ring_all_reduce_cost():
    # 2 (n - 1) / n * bytes / busbw, plus a latency per hop.
    assert ring_time(8e9, 8, busbw_gbs=100.0, latency_us=0.0) == pytest.approx(2 * 7 / 8 * 0.08)
    assert ring_time(1e9, 1, busbw_gbs=1.0, latency_us=5.0) == 0.0
    assert ring_time(0, 4, busbw_gbs=1.0, latency_us=10.0) == pytest.approx(6 * 10e-6)


def test_full_checkpointing_costs_a_forward_and_two_tp_all_reduces(mtnlg, a100):
    layout = Layout.from_config(mtnlg, 2240)
    full = step_time(mtnlg, layout, a100, 8)
    none = step_time(mtnlg, replace(layout, checkpointing="none"), a100, 8)
    assert full.recompute > 0 and none.recompute == 0
    assert full.compute - none.compute == pytest.approx(full.recompute)
    assert full.tp_comm / none.tp_comm == pytest.approx((6 * 3 + 1) / (4 * 3 + 1), rel=0.01)


def test_tensor_parallel_across_nodes_is_penalised(mtnlg, a100):
    inside = step_time(mtnlg, Layout(tp=8, pp=35, dp=8, micro_batch=1, checkpointing="full"), a100, 8)
    across = step_time(mtnlg, Layout(tp=16, pp=35, dp=4, micro_batch=1, checkpointing="full"), a100, 8)
    assert across.tp_comm > 5 * inside.tp_comm


def test_interleaving_shrinks_the_bubble(mtnlg, a100):
    config = load_config("mtnlg-530b", ["train.global_batch_size=1680"])  # 1680 / 8 = 210 = 6 x 35
    plain = step_time(config, Layout(tp=8, pp=35, dp=8, micro_batch=1, checkpointing="full"), a100, 8)
    v3 = step_time(config, Layout(tp=8, pp=35, dp=8, micro_batch=1, checkpointing="full", virtual_stages=3,
                                  schedule="interleaved"), a100, 8)
    # Fill and drain shrink by v; each stage slot grows a little (v times the point-to-point sends).
    assert plain.bubble / 3 < v3.bubble < 1.1 * plain.bubble / 3
    assert v3.pp_comm == pytest.approx(3 * plain.pp_comm)


def test_unknown_hardware_and_bad_profile_fields_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown hardware 'tpu-v9'"):
        load_hardware("tpu-v9")
    extra = tmp_path / "hw.yaml"
    extra.write_text("a100-80gb:\n  peak_tflop: 1.0\n")
    with pytest.raises(ValueError, match="unknown field.*peak_tflop"):
        load_hardware("a100-80gb", extra)
    extra.write_text("my-gpu:\n  peak_tflops: 100.0\n")
    with pytest.raises(ValueError, match="my-gpu"):
        load_hardware("my-gpu", extra)  # missing required fields


def test_user_profile_extends_and_overrides(tmp_path):
    extra = tmp_path / "hw.yaml"
    extra.write_text("a100-80gb:\n  sustained_efficiency: 0.27\n")
    slower = load_hardware("a100-80gb", extra)
    assert slower.sustained_efficiency == 0.27 and slower.peak_tflops == 312.0
    config = load_config("mtnlg-530b")
    layout = Layout.from_config(config, 2240)
    assert step_time(config, layout, slower, 8).compute == pytest.approx(
        2 * step_time(config, layout, load_hardware("a100-80gb"), 8).compute, rel=0.05)


def test_cpu_profile_measures_and_splits_the_host_among_ranks(monkeypatch):
    import trident.hardware as hardware
    from trident.plan.time import per_device

    monkeypatch.setattr(hardware, "measured_cpu_peak_tflops", lambda dtype: 0.2)
    cpu = load_hardware("cpu")
    assert cpu.peak_tflops == 0.2 and cpu.fp32_peak_tflops == 0.2 and cpu.memory_gib > 0.5
    two = per_device(cpu, gpus=2, gpus_per_node=cpu.gpus_per_node)
    assert two.peak_tflops == pytest.approx(0.1)
    assert two.usable_bytes == pytest.approx((cpu.memory_gib - 2 * cpu.reserved_gib) / 2 * 2**30)
    a100 = load_hardware("a100-80gb")
    assert per_device(a100, gpus=16, gpus_per_node=8) is a100  # real devices are not shared
