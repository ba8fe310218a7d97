"""The pipeline schedule registry: every record builds valid lists whose bubble and memory are the
record's formulas, config validation and the planner refuse exactly what its check refuses, and no
module but config/pipeline_schedules.py spells a schedule's name."""
import ast
import re
from pathlib import Path

import pytest

from trident.config import CHOICES, ConfigError, load_config
from trident.config.pipeline_schedules import SPECS, ScheduleError
from trident.parallel.pipeline.overlap import CONTRACTS, schedule_for
from trident.parallel.pipeline.registry import SCHEDULES, schedule
from trident.parallel.pipeline.schedules import BackwardWeight, forward_only, peak_inflight
from trident.parallel.pipeline.simulate import check_schedule, simulate
from trident.plan.memory import Layout
from trident.plan.search import layout_problems

SRC = Path(__file__).resolve().parents[1] / "src" / "trident"
NAMES = tuple(SCHEDULES)


def shapes(name):
    """(pp, m, v) for pp 2 and 4, m a multiple of pp (interleaved needs it), v its chunk rule's at 2."""
    v = SCHEDULES[name].spec.chunks(2)
    return [(pp, m, v) for pp in (2, 4) for m in (pp, 2 * pp, 4 * pp)]


def test_one_registry_names_every_schedule():
    assert tuple(SPECS) == NAMES == CHOICES["parallel.schedule"]
    assert all(SCHEDULES[name].name == name for name in NAMES)
    with pytest.raises(ScheduleError, match="unknown pipeline schedule 'zigzag'; choose one of " + ", ".join(NAMES)):
        schedule("zigzag")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("contract", CONTRACTS)
def test_every_schedule_builds_valid_lists_with_its_memory(name, contract):
    rules = SCHEDULES[name].spec
    for pp, m, v in shapes(name):
        lists = schedule_for(name, pp, m, v, contract)
        assert check_schedule(lists) == (m, v), (pp, m, v)
        check_schedule(forward_only(lists), backward=False)
        assert all(any(isinstance(op, BackwardWeight) for op in ops) == rules.splits_weight_grads for ops in lists)
        if contract == "batched":  # the lists NCCL runs are what the planner's memory formula counts
            peaks = peak_inflight(lists)
            assert [rules.in_flight(pp, s, m, v) * v for s in range(pp)] == peaks, (pp, m, v)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("contract", CONTRACTS)
def test_bubble_formula_is_the_simulated_idle_fraction_at_uniform_costs(name, contract):
    # f = 1, backward 2 (B = W = 1 when split), free messages. Step times are sums of small integers,
    # exact in binary, so a formula the schedule reaches matches to rounding (1e-9). ZB-H1 holds only
    # 1F1B's micro-batches (plus the contract's slack): too few to fill the drain, so it reaches the
    # zero-bubble bound only at pp = 2 with slack and otherwise idles up to pp - 1 unit steps more per
    # stage (pipeline/zero_bubble.py), a bubble up to (pp - 1) / (3m) above; the bound stays a floor.
    entry = SCHEDULES[name]
    for pp, m, v in shapes(name):
        simulated = simulate(schedule_for(name, pp, m, v, contract), 1.0, 2.0, contract=contract).bubble_fraction
        theory = entry.bubble(pp, m, v)
        capped = entry.spec.splits_weight_grads and entry.spec.extra_inflight(pp) == 0
        slack = (pp - 1) / (3 * m) if capped else 0.0
        assert theory - 1e-9 <= simulated <= theory + slack + 1e-9, (pp, m, v, simulated, theory)


def config_cases():
    """Pipeline shapes around every rule: pp 1, 2, 4; v 1-3; batch sizes with and without a ramp-up
    whose start is not a multiple of pp; full recomputation or none."""
    for name in NAMES:
        for pp in (1, 2, 4):
            for v in (1, 2, 3):
                for batch, ramp in ((4, None), (6, None), (8, None), (8, [2, 2, 1000]), (8, [4, 4, 1000])):
                    for checkpointing in ("none", "full"):
                        yield name, pp, v, batch, ramp, checkpointing


def test_config_validation_refuses_exactly_what_the_record_refuses():
    refused = 0
    for name, pp, v, batch, ramp, checkpointing in config_cases():
        rules = SPECS[name]
        counts = (batch,) + tuple(ramp[:2] if ramp else ())  # micro_batch_size 1, dp 1
        expected = rules.check(pp, v, counts) + [p for p in [rules.checkpointing_problem(checkpointing)] if p]
        config = load_config(None, [f"parallel.schedule={name}", f"parallel.pp={pp}", f"parallel.virtual_stages={v}",
                                    "model.num_layers=12", "train.micro_batch_size=1",
                                    f"train.global_batch_size={batch}", f"train.rampup_batch_size={ramp or 'null'}",
                                    f"train.activation_checkpointing={checkpointing}"])
        case = (name, pp, v, batch, ramp, checkpointing)
        if not expected:
            config.validate(pp)
            continue
        refused += 1
        with pytest.raises(ConfigError) as error:
            config.validate(pp)
        assert any(str(error.value).startswith(f"config key '{p.key}': {p.message}") for p in expected), \
            (case, error.value)
    assert 0 < refused < len(list(config_cases()))


def test_the_planner_refuses_exactly_what_the_record_refuses():
    config = load_config(None, ["model.num_layers=12", "train.global_batch_size=8"])
    for name in NAMES:
        for pp in (1, 2, 4):
            for v in (1, 2, 3):
                for micro in (1, 2):  # 8 or 4 micro-batches per replica
                    layout = Layout(tp=1, pp=pp, dp=1, micro_batch=micro, virtual_stages=v, schedule=name)
                    expected = [p.message for p in SPECS[name].check(pp, v, (8 // micro,))]
                    assert layout_problems(config, layout, pp) == expected, (name, pp, v, micro)


def spelled_names(path: Path) -> list[str]:
    """Schedule names inside the file's string literals (docstrings aside: prose may name them)."""
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, NAMES)) + r")(?![\w-])")
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [f"{path.relative_to(SRC.parent)}:{node.lineno}: {match}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            for match in pattern.findall(node.value)]


def test_no_module_outside_the_registry_spells_a_schedule_name():
    registry = SRC / "config" / "pipeline_schedules.py"
    assert sorted(m.split(": ")[1] for m in spelled_names(registry)) == sorted(NAMES)
    elsewhere = [hit for path in sorted(SRC.rglob("*.py")) if path != registry for hit in spelled_names(path)]
    assert not elsewhere, "schedule names spelled outside config/pipeline_schedules.py:\n" + "\n".join(elsewhere)
