"""ZeRO-3 with every feature (issue 53 item 3): compiled blocks and in-training evaluation, each
against one process or ZeRO-0. ZeRO-3 all-gathers each layer's weights around its use, so the
gathering hooks run around the compiled compute, and every data-parallel rank scores as many batches."""
from __future__ import annotations

import pytest

from distributed import run_distributed
from eval_fixtures import FIXTURES, tiny_tokenizer
from train_fixtures import RAMP, RandomTokens, assert_matches, tiny_config, train_full

ZERO3 = ["parallel.dp=2", "parallel.zero_stage=3"]


def _compiled(rank, world, out_dir):
    return {name: train_full(tiny_config(*RAMP, *ZERO3, *extra), f"{out_dir}/{name}/r{rank}")
            for name, extra in (("eager", []), ("compiled", ["train.compile=true"]))}


@pytest.mark.timeout(280)
def test_zero3_with_compiled_blocks_matches_eager_zero3_and_one_process(tmp_path):
    reference = train_full(tiny_config(*RAMP), tmp_path / "single")
    ranks = run_distributed(_compiled, 2, str(tmp_path), timeout=270)
    assert_matches([rank["compiled"] for rank in ranks], reference)
    assert_matches([rank["compiled"] for rank in ranks], ranks[0]["eager"])


TASKS, SHOTS, LIMIT = ["piqa", "lambada"], [0], 3


def _scores(rank, world, out_dir, tokenizer_file, vocab_size):
    """Losses and logged evaluation fields of 2 steps on dp2 with the evaluation at step 2, by ZeRO stage."""
    from trident.train.trainer import Trainer

    settings = [f"eval.tasks=[{','.join(TASKS)}]", "eval.interval=2", f"eval.shots={SHOTS}", f"eval.limit={LIMIT}",
                f"eval.data_dir={FIXTURES}", "eval.batch_size=2", f"data.tokenizer={tokenizer_file}"]
    runs = {}
    for stage in (0, 3):
        config = tiny_config("train.steps=2", "parallel.dp=2", f"parallel.zero_stage={stage}", *settings)
        trainer = Trainer(config, f"{out_dir}/zero{stage}", datasets=(RandomTokens(32), None),
                          vocab_size=vocab_size, log=lambda *a: None)
        records = trainer.train()
        runs[stage] = ([r["loss"] for r in records],
                       {k: v for k, v in records[-1].items() if k.startswith("eval/") and k != "eval/seconds"})
    return runs


@pytest.mark.timeout(200)
def test_zero3_scores_tasks_during_training_as_zero0_does(tmp_path):
    tok = tiny_tokenizer(tmp_path)
    ranks = run_distributed(_scores, 2, str(tmp_path), str(tmp_path / "tokenizer.json"), tok.vocab_size, timeout=180)
    for runs in ranks:
        losses, scores = runs[3]
        assert losses == pytest.approx(runs[0][0], rel=1e-6)
        assert len(scores) == 3 + 2  # piqa: acc, acc_norm, acc_norm_token; lambada: acc, perplexity
        assert scores == pytest.approx(runs[0][1], rel=1e-5)
        assert scores == ranks[0][3][1]  # every rank logs the same numbers
