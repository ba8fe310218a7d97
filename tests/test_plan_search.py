"""Layout search: every valid layout costed, impossible ones rejected with a reason, the paper's mesh ranked."""
from dataclasses import replace

import pytest

from trident.config import load_config
from trident.plan.memory import Layout
from trident.plan.search import candidate_layouts, evaluate, layout_problems, rank_layouts
from trident.hardware import load_hardware


@pytest.fixture(scope="module")
def mtnlg():
    return load_config("mtnlg-530b")


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-80gb")


@pytest.fixture(scope="module")
def ranking_2240(mtnlg, a100):
    # the layouts MT-NLG chose from: no context parallelism, no hybrid sharding (the search has both:
    # test_plan_context.py)
    return rank_layouts(mtnlg, a100, gpus=2240, gpus_per_node=8, max_cp=1, hybrid=False)


def test_paper_mesh_is_in_the_top_three(ranking_2240):
    meshes = [(p.layout.tp, p.layout.pp, p.layout.dp) for p in ranking_2240.best_per_mesh()]
    assert (8, 35, 8) in meshes[:3], meshes[:5]
    # Every fitting layout is costed and ordered by predicted step time.
    times = [p.time.total for p in ranking_2240.plans]
    assert times == sorted(times)
    assert all(p.memory.total <= p.usable_bytes for p in ranking_2240.plans)


def test_paper_layout_itself_is_valid_and_ranked(ranking_2240, mtnlg):
    paper = Layout.from_config(mtnlg, 2240)
    position = ranking_2240.position(**vars(paper))
    assert position is not None and position <= 20
    # Full checkpointing is the memory-safe choice; with dropout-free activations the planner finds that
    # selective recompute (Korthikanti et al. 2022) also fits on TP8 x PP35 and is faster.
    selective = ranking_2240.position(**vars(replace(paper, checkpointing="selective")))
    assert selective is not None and selective < position


def test_every_candidate_multiplies_to_the_gpu_count(mtnlg):
    layouts = list(candidate_layouts(mtnlg, 40))  # includes tp8 x pp5: 1920 micro-batches, a multiple of 5
    assert layouts and all(l.tp * l.pp * l.cp * l.dp == 40 for l in layouts)
    assert {l.checkpointing for l in layouts} == {"none", "selective", "full"}
    assert {l.zero_stage for l in layouts if l.dp > 1} == {0, 1, 2, 3}
    assert any(l.virtual_stages > 1 and l.schedule == "interleaved" for l in layouts)


@pytest.mark.parametrize("layout,message", [
    (Layout(tp=3, pp=35, dp=1, micro_batch=1), "tp=3 does not divide model.num_heads=128"),
    (Layout(tp=8, pp=35, dp=7, micro_batch=1), "is not divisible by micro_batch x dp = 1 x 7"),
    (Layout(tp=8, pp=140, dp=2, micro_batch=1), "pp x virtual_stages = 140 > model.num_layers=105"),
    (Layout(tp=8, pp=35, dp=8, micro_batch=1, virtual_stages=3, schedule="interleaved"),
     "interleaved schedule needs micro-batches per replica (240) to be a multiple of pp=35"),
    (Layout(tp=8, pp=35, dp=8, micro_batch=1, virtual_stages=2), "virtual_stages > 1 needs schedule=interleaved"),
])
def test_impossible_layouts_are_rejected_with_the_reason(mtnlg, layout, message):
    problems = layout_problems(mtnlg, layout, layout.gpus)
    assert any(message in p for p in problems), problems


def test_layout_that_does_not_fit_names_the_memory(mtnlg, a100):
    # No pipelining, no checkpointing: 530B parameters on TP8 need ~1 TB per GPU.
    plan = evaluate(mtnlg, Layout(tp=8, pp=1, dp=240, micro_batch=1, zero_stage=1), a100, 1920, 8)
    assert not plan.ok
    assert any("GiB per GPU" in r and "usable on a100-80gb" in r for r in plan.reasons), plan.reasons
    assert plan.memory is not None  # still costed, so the user sees by how much


def test_gpu_count_mismatch_is_rejected(mtnlg, a100):
    plan = evaluate(mtnlg, Layout(tp=8, pp=35, dp=8, micro_batch=1), a100, 2000, 8)
    assert not plan.ok and "!= 2000 GPUs" in plan.reasons[0]


def test_rejections_are_counted_not_dropped(ranking_2240):
    assert ranking_2240.rejected  # reasons -> counts
    assert any("GiB per GPU" in reason for reason in ranking_2240.rejected)
    assert any(reason.startswith("mesh: ") for reason in ranking_2240.rejected)
    memory_rejected = sum(c for r, c in ranking_2240.rejected.items() if "GiB per GPU" in r)
    # Every costed layout either fits (ranked) or was rejected for memory.
    assert len(ranking_2240.plans) + memory_rejected == ranking_2240.examined
    interleave = [c for r, c in ranking_2240.rejected.items() if r.startswith("interleaved schedule")]
    assert sum(interleave) > 0 and sum(interleave) % 6 == 0  # counted per checkpointing x ZeRO choice


def test_less_memory_leaves_a_subset_of_the_layouts():
    config = load_config("gpt-1.3b", ["model.vocab_size=50257"])
    big = rank_layouts(config, load_hardware("a100-80gb"), gpus=8, gpus_per_node=8, max_cp=1, hybrid=False)
    small = rank_layouts(config, load_hardware("a100-40gb"), gpus=8, gpus_per_node=8, max_cp=1, hybrid=False)
    assert small.plans and all(p.memory.total <= 37 * 2**30 for p in small.plans)
    fitting = lambda ranking: {p.layout for p in ranking.plans}  # noqa: E731
    assert fitting(small) < fitting(big)  # strictly fewer: some layouts need more than 37 GiB
    assert small.examined == big.examined


def test_rejection_kinds_group_numbers_but_keep_hardware_names():
    from trident.plan.rejections import reason_kind

    assert reason_kind("needs 88.0 GiB per GPU (stage 3), more than the 77.0 GiB usable on a100-80gb") == \
        "needs N GiB per GPU (stage N), more than the N GiB usable on a100-80gb"
