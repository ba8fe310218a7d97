"""End to end: run_evaluation over every task, results.json + samples + table, and `trident eval`
on a saved trident checkpoint and on a saved Hugging Face model."""
from __future__ import annotations

import json
import shutil

import pytest

from eval_fixtures import FIXTURES, save_trident_checkpoint, tiny_lm, tiny_tokenizer
from trident.cli import main
from trident.evaluate.harness import run_evaluation
from trident.evaluate.results import build_table
from trident.tasks import TASK_NAMES

ALL_TASKS = list(TASK_NAMES)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def evaluated(tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    lm = tiny_lm(tokenizer, seq_length=256, batch_size=8)
    results = run_evaluation(lm, ALL_TASKS, [0, 1], FIXTURES, out, seed=7, limit=3, log_samples=True,
                             progress=False)
    return results, out


def test_results_json_has_every_task_and_shot_with_provenance(evaluated):
    results, out = evaluated
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["seed"] == 7 and on_disk["trident_version"] and on_disk["model"]["kind"] == "trident"
    assert set(on_disk["results"]) == set(ALL_TASKS)
    for task, per_shot in on_disk["results"].items():
        assert set(per_shot) == {"0", "1"}
        for shots, entry in per_shot.items():
            assert 1 <= entry["n"] <= 3
            assert entry["prompt_version"] and entry["fewshot"]["k"] == int(shots)
            assert entry["fewshot"]["delimiter"] == "\n\n"
            primary = entry["primary_metric"]
            assert 0.0 <= entry["metrics"][primary] <= 1.0, (task, shots)
            assert set(entry["stderr"]) == set(entry["metrics"])
    assert on_disk["results"]["lambada"]["1"]["fewshot"]["source_split"] == "test"
    assert on_disk["results"]["piqa"]["1"]["fewshot"]["source_split"] == "train"
    assert on_disk["results"]["lambada"]["0"]["metrics"]["perplexity"] > 1.0


def test_samples_log_every_example_and_few_shot_choice(evaluated):
    _, out = evaluated
    samples = [json.loads(line) for line in (out / "samples" / "lambada_1shot.jsonl").read_text().splitlines()]
    assert [s["doc_index"] for s in samples] == [0, 1, 2]
    for s in samples:
        # harness construction: LAMBADA's pool is its scored split and, as in the harness, not filtered
        assert len(s["fewshot_indices"]) == 1
        context, continuation = s["requests"][0]
        assert context.count("\n\n") == 1 and not continuation.startswith("  ")
    hans = [json.loads(line) for line in (out / "samples" / "hans_0shot.jsonl").read_text().splitlines()]
    assert hans[0]["heuristic"] == "lexical_overlap" and len(hans[0]["logprobs"]) == 2


def test_limit_keeps_the_whole_split_as_few_shot_pool(tokenizer):
    # LAMBADA's few-shot pool is its own test split: --limit 1 must still offer the other 3 examples
    lm = tiny_lm(tokenizer, seq_length=256)
    results = run_evaluation(lm, ["lambada"], [3], FIXTURES, None, limit=1, progress=False)
    assert results["results"]["lambada"]["3"]["n"] == 1


def test_table_lists_every_task(evaluated):
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(build_table(evaluated[0]))
    text = console.export_text()
    for task in ALL_TASKS:
        assert task in text
    assert "0-shot" in text and "1-shot" in text and "acc_norm" in text


def test_same_seed_same_prompts_and_scores(tokenizer, evaluated):
    results, _ = evaluated
    lm = tiny_lm(tokenizer, seq_length=256, batch_size=3)
    again = run_evaluation(lm, ["piqa", "winogrande"], [1], FIXTURES, None, seed=7, limit=3, progress=False)
    for task in ("piqa", "winogrande"):
        for metric, value in again["results"][task]["1"]["metrics"].items():
            assert value == pytest.approx(results["results"][task]["1"]["metrics"][metric])


def test_cli_evaluates_a_trident_checkpoint(tokenizer, tmp_path, capsys):
    ckpt, model = save_trident_checkpoint(tokenizer, tmp_path)
    out = tmp_path / "eval"
    code = main(["eval", str(ckpt), "--tasks", "lambada,piqa,hellaswag", "--shots", "0,1", "--data-dir",
                 str(FIXTURES), "--out", str(out), "--batch-size", "2", "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    on_disk = json.loads((out / "results.json").read_text())
    assert printed["results"] == on_disk["results"]
    assert on_disk["model"]["checkpoint"] == str(ckpt.resolve())
    # the same weights wrapped in memory give the same numbers
    from trident.evaluate.lm import trident_lm

    direct = run_evaluation(trident_lm(model, tokenizer, 128), ["piqa"], [1], FIXTURES, None, progress=False)
    assert direct["results"]["piqa"]["1"]["metrics"] == pytest.approx(on_disk["results"]["piqa"]["1"]["metrics"])


def test_bf16_scores_close_to_fp32(tokenizer, tmp_path):
    ckpt, _ = save_trident_checkpoint(tokenizer, tmp_path)
    from trident.evaluate.lm import load_trident

    requests = [("Question: Clean a window\nAnswer:", " wipe it with soapy water."), ("The dog barked", " at")]
    fp32 = load_trident(ckpt).loglikelihood(requests)
    bf16 = load_trident(ckpt, dtype="bf16")
    assert bf16.describe()["dtype"] == "bf16"
    for (a, _), (b, _) in zip(fp32, bf16.loglikelihood(requests)):
        assert b == pytest.approx(a, rel=0.05) and a != b


def test_cli_reports_a_missing_data_file(tokenizer, tmp_path, capsys):
    ckpt, _ = save_trident_checkpoint(tokenizer, tmp_path)
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "piqa", data / "piqa")
    (data / "piqa" / "valid-labels.lst").unlink()
    code = main(["eval", str(ckpt), "--tasks", "piqa", "--data-dir", str(data)])
    assert code == 2  # found before any scoring
    err = capsys.readouterr().err
    assert "piqa 0-shot:" in err and "valid-labels.lst" in err and "one label (0 or 1) per line" in err
    assert main(["eval", str(ckpt), "--tasks", "squad", "--data-dir", str(data)]) == 2
    assert "unknown task 'squad'" in capsys.readouterr().err
