"""--fewshot-seeds S: each few-shot cell scored with S draws (seeds SEED..SEED+S-1). Every draw's
score equals a separate run with that seed; mean, sd, min, max and the flipped share are those
numpy gives on the per-seed values and per-example logs."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from eval_fixtures import FIXTURES, tiny_model, tiny_tokenizer
from trident.cli import main
from trident.evaluate.harness import run_evaluation
from trident.evaluate.lm import trident_lm
from trident.evaluate.results import build_spread_table
from trident.evaluate.spread import flipped_share

TASKS = ["piqa", "winogrande", "lambada", "race"]
SEED, DRAWS = 5, 3


def opinionated_lm(tokenizer):
    """A random tiny GPT with its weight matrices x5: its choices move with the prompt, so draws differ."""
    model, cfg = tiny_model(tokenizer, seq_length=256)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.mul_(5.0)
    return trident_lm(model, tokenizer, cfg.seq_length)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def spread_run(tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("spread")
    results = run_evaluation(opinionated_lm(tokenizer), TASKS, [0, 1], FIXTURES, out, seed=SEED,
                             fewshot_seeds=DRAWS, log_samples=True, progress=False)
    return results, out


@pytest.mark.timeout(60)
def test_each_draw_scores_as_a_separate_run_with_its_seed(tokenizer, spread_run):
    results, _ = spread_run
    assert results["fewshot_seeds"] == [5, 6, 7]
    lm = opinionated_lm(tokenizer)
    for i, seed in enumerate(results["fewshot_seeds"]):
        alone = run_evaluation(lm, TASKS, [1], FIXTURES, None, seed=seed, progress=False)
        for task in TASKS:
            drawn = results["results"][task]["1"]["fewshot_spread"]["metrics"]
            for metric, value in alone["results"][task]["1"]["metrics"].items():
                assert drawn[metric]["per_seed"][i] == pytest.approx(value, rel=1e-9), (task, metric, seed)
    for task in TASKS:  # the entry itself is the plain run's (first seed); zero-shot is drawn once
        entry = results["results"][task]["1"]
        assert entry["metrics"] == {m: s["per_seed"][0] for m, s in entry["fewshot_spread"]["metrics"].items()}
        assert "fewshot_spread" not in results["results"][task]["0"]


@pytest.mark.timeout(30)
def test_statistics_are_numpys_on_the_per_seed_values(spread_run):
    results, out = spread_run
    moved, flipped = 0, 0
    for task in TASKS:
        spread = results["results"][task]["1"]["fewshot_spread"]
        logs = [[json.loads(line)["metrics"] for line in (out / "samples" / name).read_text().splitlines()]
                for name in (f"{task}_1shot.jsonl", f"{task}_1shot_seed6.jsonl", f"{task}_1shot_seed7.jsonl")]
        for metric, stats in spread["metrics"].items():
            values = np.array(stats["per_seed"])
            assert stats["mean"] == pytest.approx(values.mean())
            assert stats["std"] == pytest.approx(values.std(ddof=1))
            assert (stats["min"], stats["max"]) == (values.min(), values.max())
            moved += stats["std"] > 0
            if metric.startswith("acc"):
                per_example = np.array([[example[metric] for example in log if metric in example] for log in logs])
                expected = (per_example.min(axis=0) != per_example.max(axis=0)).mean()
                assert stats["flipped"] == pytest.approx(expected), (task, metric)
                flipped += stats["flipped"] > 0
            else:
                assert "flipped" not in stats  # perplexity has no per-example correctness
    assert moved > 0 and flipped > 0  # the draws do change scores and answers: the checks compare real spreads


@pytest.mark.timeout(10)
def test_flipped_share_by_hand():
    draws = [[{"acc": 1.0}, {"acc": 0.0}, {"acc": 1.0}, {"x": 2.0}],
             [{"acc": 1.0}, {"acc": 1.0}, {"acc": 1.0}, {"x": 3.0}],
             [{"acc": 1.0}, {"acc": 0.0}, {"acc": 0.0}, {"x": 2.0}]]
    assert flipped_share("acc", draws) == pytest.approx(2 / 3)  # examples 1 and 2 of the 3 with acc


@pytest.mark.timeout(10)
def test_spread_table_and_refused_seed_count(spread_run, capsys):
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(build_spread_table(spread_run[0]))
    text = console.export_text()
    assert "few-shot spread over 3 draws (seeds 5, 6, 7)" in text and "flipped" in text and "perplexity" in text
    assert main(["eval", "ckpt", "--tasks", "piqa", "--shots", "1", "--fewshot-seeds", "0"]) == 2
    assert "--fewshot-seeds must be >= 1" in capsys.readouterr().err
