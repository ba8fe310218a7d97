"""Few-shot prompts under the default "harness" construction are exactly lm-evaluation-harness's.

For every task the harness also has, the harness's own task config (its shipped YAML, included
unchanged; only dataset_path points at the local hub copy of tests/hub_fixtures.py) builds its
requests at k shots with its sampler and seed; trident builds its requests from the same hub copy.
Both lists of (context, continuation) must be equal, document by document, choice by choice.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")  # a dev dependency: installed whenever the tests are
pytest.importorskip("datasets")

sys.path.insert(0, str(Path(__file__).parent))

from hub_fixtures import hub_root, offline_hub  # noqa: E402,F401 (fixtures)

import lm_eval  # noqa: E402
from trident.evaluate import fewshot  # noqa: E402
from trident.evaluate.harness import build_prompts  # noqa: E402
from trident.tasks import get_task  # noqa: E402

HARNESS_TASKS = Path(lm_eval.__file__).parent / "tasks"
# trident task -> (the harness's YAML of the same task, hub repository it reads)
SHARED = {
    "lambada": ("lambada/lambada_openai.yaml", "EleutherAI/lambada_openai"),
    "lambada_cloze": ("lambada_cloze/lambada_openai_cloze.yaml", "EleutherAI/lambada_openai"),
    "piqa": ("piqa/piqa.yaml", "baber/piqa"),
    "hellaswag": ("hellaswag/hellaswag.yaml", "Rowan/hellaswag"),
    "winogrande": ("winogrande/default.yaml", "allenai/winogrande"),
    "boolq": ("super_glue/boolq/default.yaml", "aps/super_glue"),
    "rte": ("super_glue/rte/default.yaml", "aps/super_glue"),
    "wic": ("super_glue/wic/default.yaml", "aps/super_glue"),
    "anli_r1": ("anli/anli_r1.yaml", "facebook/anli"),
    "anli_r2": ("anli/anli_r2.yaml", "facebook/anli"),
    "anli_r3": ("anli/anli_r3.yaml", "facebook/anli"),
    "race": ("race/race.yaml", "EleutherAI/race"),
}
SEED = 1234  # the harness's default fewshot_random_seed


def harness_requests(name: str, k: int, hub_root: Path, folder: Path) -> list[tuple[str, str]]:
    """The harness's (context, continuation) requests for its own config of `name` at k shots."""
    from lm_eval.tasks import TaskManager

    config, repo = SHARED[name]
    (folder / f"x_{name}.yaml").write_text(f"include: {HARNESS_TASKS / config}\ntask: x_{name}\n"
                                           f"dataset_path: {hub_root / repo}\n")
    # only our one file is indexed: the harness's own YAML is read through the include
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    task = manager.load([f"x_{name}"])["tasks"][f"x_{name}"]
    task.set_config("num_fewshot", k)
    task.set_fewshot_seed(SEED)
    task.build_all_requests(rank=0, world_size=1, cache_requests=False)
    return [tuple(instance.arguments) for instance in task.instances]


def trident_requests(name: str, k: int, construction: str) -> list[tuple[str, str]]:
    task = get_task(name)
    docs = task.load(None, task.eval_split)
    pool = fewshot.load_pool(task, None, docs)
    return build_prompts(task, k, docs, pool, SEED, construction)[0]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(SHARED))
def test_fewshot_prompts_equal_the_harness(name, offline_hub, tmp_path):
    task = get_task(name)
    pool = fewshot.load_pool(task, None, task.load(None, task.eval_split))
    for k in range(min(3, len(pool.docs))):  # the harness draws k + 1 when it removes the scored document
        theirs = harness_requests(name, k, offline_hub, tmp_path)
        ours = trident_requests(name, k, "harness")
        assert len(ours) == len(theirs), (name, k)
        for i, (mine, harness) in enumerate(zip(ours, theirs)):
            assert mine == harness, (name, k, i)


@pytest.mark.timeout(120)
def test_per_document_construction_differs_as_documented(offline_hub, tmp_path):
    """The named per-document option keeps trident's earlier prompts: LAMBADA shots with one space,
    and each document seeded on its own, so it is not the harness's prompt."""
    ours = trident_requests("lambada", 1, "per-document")
    theirs = harness_requests("lambada", 1, offline_hub, tmp_path)
    assert ours != theirs
    assert "  " in theirs[0][0] and all("  " not in context for context, _ in ours)
