"""Downstream evaluation during training (config `eval`): the scores a tp2 / pp2 job logs at step N
equal `trident eval` on step N's checkpoint, and the losses equal a run without the evaluation."""
from __future__ import annotations

import json

import pytest

from distributed import run_distributed
from eval_fixtures import FIXTURES, tiny_tokenizer
from train_fixtures import RandomTokens, tiny_config

TASKS, SHOTS, LIMIT = ["piqa", "lambada"], [0, 1], 4
WITH_DROPOUT = ["model.hidden_dropout=0.1", "model.attention_dropout=0.1"]  # dropout draws must not move


def _eval_settings(tokenizer_file: str) -> list[str]:
    return [f"eval.tasks=[{','.join(TASKS)}]", "eval.interval=2", f"eval.shots={SHOTS}", f"eval.limit={LIMIT}",
            f"eval.data_dir={FIXTURES}", "eval.batch_size=3", f"data.tokenizer={tokenizer_file}"]


def _train(config, out, vocab_size):
    from trident.train.trainer import Trainer

    trainer = Trainer(config, out, datasets=(RandomTokens(config.model.seq_length), None), vocab_size=vocab_size,
                      log=lambda *a: None)
    return trainer.train(), trainer.checkpoint_root


def _job(rank, world, layout, root, tokenizer_file, vocab_size):
    """Train 4 steps with the evaluation every 2 and without it; then `trident eval`'s library entry on
    the step-2 checkpoint in the same layout."""
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.parallel_lm import load_parallel

    steps = ["train.steps=4", "checkpoint.save_interval=2", *WITH_DROPOUT, *layout]
    extra = ["logging.tensorboard=true"] if "parallel.tp=2" in layout else []
    records, checkpoints = _train(tiny_config(*steps, *_eval_settings(tokenizer_file), *extra), root / "with",
                                  vocab_size)
    plain, _ = _train(tiny_config(*steps), root / "without", vocab_size)
    evaluation_layout = [x for x in layout if x.split("=")[0] in ("parallel.tp", "parallel.pp")]  # any layout loads
    lm = load_parallel(checkpoints / "step_0000002", evaluation_layout, batch_size=2, tokenizer_path=tokenizer_file)
    again = run_evaluation(lm, TASKS, SHOTS, FIXTURES, None, limit=LIMIT, progress=False)
    return records, [r["loss"] for r in plain], again["results"], str(checkpoints)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    return tiny_tokenizer(root), str(root / "tokenizer.json")


def _logged(records, step):
    (record,) = [r for r in records if r["step"] == step]
    return {k: v for k, v in record.items() if k.startswith("eval/")}


def _expected(results):
    return {f"eval/{task}/{k}shot/{metric}": value
            for task, by_shots in results.items() for k, entry in by_shots.items()
            for metric, value in entry["metrics"].items()}


INTERLEAVED = ["parallel.pp=2", "parallel.virtual_stages=2", "parallel.schedule=interleaved", "model.num_layers=4"]


@pytest.mark.parametrize("layout", [["parallel.tp=2"], ["parallel.pp=2"], INTERLEAVED],
                         ids=["tp2", "pp2", "pp2-interleaved"])
def test_in_training_scores_equal_trident_eval_and_losses_unchanged(tmp_path, tokenizer, layout):
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_trident

    tok, tokenizer_file = tokenizer
    ranks = run_distributed(_job, 2, layout, tmp_path, tokenizer_file, tok.vocab_size, timeout=240)
    records, plain_losses, same_layout, checkpoints = ranks[0]
    assert [r["loss"] for r in records] == plain_losses  # bit for bit: the evaluation left training alone
    logged = _logged(records, 2)
    seconds = logged.pop("eval/seconds")
    assert seconds > 0 and _logged(records, 4) and not _logged(records, 3)
    assert logged == _expected(same_layout)  # `trident eval CKPT <layout>`: exactly the same numbers
    # and `trident eval CKPT` in one process: the same up to float summation order
    single = run_evaluation(load_trident(f"{checkpoints}/step_0000002", tokenizer_path=tokenizer_file),
                            TASKS, SHOTS, FIXTURES, None, limit=LIMIT, progress=False)
    assert logged == pytest.approx(_expected(single["results"]), rel=1e-5)
    assert len(logged) == len(SHOTS) * (3 + 2)  # piqa: acc, acc_norm, acc_norm_token; lambada: acc, perplexity
    lines = [json.loads(x) for x in (tmp_path / "with" / "metrics.jsonl").read_text().splitlines()]
    assert _logged(lines, 2) == {**logged, "eval/seconds": seconds}
    if "parallel.tp=2" in layout:
        _check_curves(tmp_path, lines)
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(tmp_path / "with" / "tensorboard"), size_guidance={"scalars": 0})
        events.Reload()
        assert [(e.step, round(e.value, 5)) for e in events.Scalars("eval/piqa/1shot/acc")] == [
            (2, round(logged["eval/piqa/1shot/acc"], 5)), (4, round(_logged(records, 4)["eval/piqa/1shot/acc"], 5))]


def test_eval_section_mistakes_stop_the_run_before_its_first_step(tmp_path, tokenizer):
    from trident.config import ConfigError
    from trident.train.trainer import Trainer

    tok, tokenizer_file = tokenizer
    config = tiny_config(*_eval_settings(tokenizer_file), f"eval.data_dir={tmp_path}")
    with pytest.raises(ConfigError, match=r"(?s)eval\.tasks.*piqa.*not found"):
        Trainer(config, tmp_path / "run", datasets=(RandomTokens(32), None), vocab_size=tok.vocab_size)
    with pytest.raises(ConfigError, match=r"eval\.interval"):
        tiny_config("eval.tasks=[piqa]").validate(1)
    with pytest.raises(ConfigError, match=r"eval\.shots"):
        tiny_config("eval.tasks=[piqa]", "eval.interval=5", "eval.shots=[-1]").validate(1)


def _check_curves(tmp_path, lines):
    """The PNG of the in-training scores (python -m trident.train.eval_curves) draws exactly the logged values."""
    from trident.train.eval_curves import eval_series, main

    series = eval_series(lines, "acc")
    assert set(series) == set(TASKS) and series["piqa"]["1shot/acc"] == [
        (r["step"], r["eval/piqa/1shot/acc"]) for r in lines if "eval/piqa/1shot/acc" in r]
    assert main([str(tmp_path / "with" / "metrics.jsonl"), str(tmp_path / "curves.png"), "--metric", "acc"]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([str(tmp_path / "without" / "metrics.jsonl"), str(tmp_path / "none.png")]) == 2
