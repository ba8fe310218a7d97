"""Parallel evaluation: a checkpoint scored under TP, PP, TP x PP and DP x TP (+SP) gives the same
per-example log-likelihoods as one process; a layout that does not fit the model is refused."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from distributed import run_distributed
from eval_fixtures import FIXTURES, tiny_tokenizer
from trident.cli import main
from trident.config import Config, ConfigError, ModelConfig
from trident.evaluate.harness import run_evaluation
from trident.evaluate.lm import load_trident
from trident.evaluate.parallel_lm import eval_config, load_parallel
from trident.parallel.tensor import vocab_parallel_scores
from trident.parallel.tensor import NO_TP

TASKS = ["piqa", "winogrande", "lambada"]  # multiple choice, partial scoring (shared contexts), greedy words
PROMPTS = ["Question: How do you clean a window?\nAnswer:", "The"]


def samples(out) -> dict[str, list]:
    """Per task and shot count: each example's per-request (logprob, is_greedy) as logged."""
    found = {}
    for path in sorted((out / "samples").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        found[path.stem] = [(r["logprobs"], r["is_greedy"]) for r in rows]
    return found


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from trident.checkpoint.writer import save_checkpoint
    from trident.model.gpt import build_model
    from trident.parallel.mesh import Mesh
    from trident.parallel.state import weight_pieces

    root = tmp_path_factory.mktemp("ckpt")
    tokenizer = tiny_tokenizer(root)
    cfg = ModelConfig(num_layers=4, hidden_size=32, num_heads=4, seq_length=128, vocab_size=tokenizer.vocab_size)
    model = build_model(cfg, cfg.padded_vocab_size(), seed=5)
    config = Config()
    config.model = cfg
    return save_checkpoint(root / "checkpoints", 1, weight_pieces(list(model.named_parameters())),
                           {"config": config.to_dict(), "step": 1}, Mesh(),
                           extra_files={"tokenizer.json": root / "tokenizer.json"})


@pytest.fixture(scope="module")
def reference(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    lm = load_trident(checkpoint, batch_size=3)
    run_evaluation(lm, TASKS, [0, 1], FIXTURES, out, seed=7, limit=3, log_samples=True, progress=False)
    return samples(out), _generated(lm)


def _generated(lm) -> list[str]:
    """Greedy and seeded-sampled continuations (the bias probes sample with temperature 1, top-k 40)."""
    return lm.generate(PROMPTS, max_new_tokens=6) + lm.generate(PROMPTS, 6, temperature=1.0, top_k=40, seed=3)


def _evaluate(rank, world, checkpoint, overrides, out):
    lm = load_parallel(checkpoint, overrides, batch_size=2)
    results = run_evaluation(lm, TASKS, [0, 1], FIXTURES, out if rank == 0 else None, seed=7, limit=3,
                             log_samples=True, progress=False)
    return results["results"], _generated(lm), lm.describe()["parallel"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world, overrides", [
    (2, ["parallel.tp=2"]),
    (2, ["parallel.pp=2"]),
    (4, ["parallel.tp=2", "parallel.pp=2"]),
    (4, ["parallel.tp=2", "parallel.dp=2", "parallel.sequence_parallel=true"]),
], ids=["tp2", "pp2", "tp2xpp2", "dp2xtp2-sp"])
def test_layouts_score_like_one_process(checkpoint, reference, tmp_path, world, overrides):
    expected, expected_text = reference
    per_rank = run_distributed(_evaluate, world, checkpoint, overrides, tmp_path, timeout=90)
    got = samples(tmp_path)
    assert set(got) == set(expected) and len(got) == len(TASKS) * 2
    for name, examples in expected.items():
        assert len(got[name]) == len(examples), name
        for (want_lp, want_greedy), (lp, greedy) in zip(examples, got[name]):
            assert lp == pytest.approx(want_lp, abs=1e-4), name
            assert greedy == want_greedy, name
    # lock step: every rank holds the same results and generated the same (single-process) text
    for results, text, layout in per_rank:
        assert results == per_rank[0][0]
        assert text == expected_text
    layout = per_rank[0][2]
    assert layout["tp"] * layout["pp"] * layout["dp"] == world


def _vocab_scores(rank, world, logits, targets, vocab_size):
    from trident.parallel.mesh import build_mesh

    mesh = build_mesh(tp=world)
    return vocab_parallel_scores(logits.chunk(world, dim=-1)[rank], targets, mesh.tp_context(), vocab_size)


@pytest.mark.timeout(60)
def test_vocab_split_scores_match_the_full_softmax_and_argmax():
    vocab_size, padded = 90, 128  # at tp=4 the last rank holds padding columns only
    logits = torch.randn(2, 5, padded, generator=torch.Generator().manual_seed(0)) * 3
    logits[..., vocab_size:] = 50.0  # padding must never win nor count
    logits[0, 0, 10] = logits[0, 0, 40] = 20.0  # a tie across ranks: the first index wins, as torch.argmax
    logits[1, 2, 70] = logits[1, 2, 33] = 20.0
    real = logits[..., :vocab_size]
    targets = torch.randint(0, vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    targets[:, ::2] = real.argmax(-1)[:, ::2]  # some positions greedy, some not
    want_lp = real.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    want_arg = real.argmax(-1)
    assert want_arg[0, 0] == 10 and want_arg[1, 2] == 33
    for world in (1, 4):
        per_rank = ([vocab_parallel_scores(logits, targets, NO_TP, vocab_size)] if world == 1 else
                    run_distributed(_vocab_scores, world, logits, targets, vocab_size, timeout=30))
        for logprob, argmax in per_rank:
            torch.testing.assert_close(logprob, want_lp, atol=1e-5, rtol=0)
            assert torch.equal(argmax, want_arg), world


def test_layout_that_does_not_divide_the_model_is_refused(checkpoint, capsys):
    code = main(["eval", str(checkpoint), "parallel.tp=3", "--nproc", "3", "--tasks", "piqa",
                 "--data-dir", str(FIXTURES)])
    assert code == 2
    err = capsys.readouterr().err
    assert "parallel.tp" in err and "num_heads=4" in err and "3 rank(s)" in err
    assert main(["eval", str(checkpoint), "parallel.pp=8", "--nproc", "8", "--tasks", "piqa"]) == 2
    assert "num_layers=4" in capsys.readouterr().err
    assert main(["eval", str(checkpoint), "parallel.tp=2", "--nproc", "3", "--tasks", "piqa"]) == 2
    assert "not divisible by tp x pp" in capsys.readouterr().err
    assert main(["eval", "--hf", "gpt2-dir", "parallel.tp=2", "--nproc", "2", "--tasks", "piqa"]) == 2
    assert "apply to a trident CKPT, not --hf" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_cli_starts_ranks_and_only_rank_zero_reports(checkpoint, reference, tmp_path, capfd):
    out = tmp_path / "eval"
    code = main(["eval", str(checkpoint), "parallel.pp=2", "--nproc", "2", "--tasks", ",".join(TASKS),
                 "--shots", "0,1", "--limit", "3", "--seed", "7", "--data-dir", str(FIXTURES), "--out", str(out),
                 "--log-samples", "--json"])
    assert code == 0
    printed = json.loads(capfd.readouterr().out)  # one JSON document: the other rank printed nothing
    assert printed["model"]["parallel"] == {"tp": 1, "pp": 2, "dp": 1, "sequence_parallel": False}
    assert json.loads((out / "results.json").read_text())["results"] == printed["results"]
    got, expected = samples(out), reference[0]
    assert set(got) == set(expected)
    for name, examples in expected.items():
        for (want_lp, _), (lp, _) in zip(examples, got[name]):
            assert lp == pytest.approx(want_lp, abs=1e-4), name


def test_overrides_may_only_change_the_layout():
    saved = Config().to_dict()
    with pytest.raises(ConfigError, match="may only set the layout"):
        eval_config(saved, ["model.num_layers=8"], 1)
    with pytest.raises(ConfigError, match="parallel.zero_stage does not apply"):
        eval_config(saved, ["parallel.zero_stage=1"], 1)
    # the saved training layout is dropped: a pp=4 checkpoint config evaluates on one rank
    saved["parallel"] = {**saved["parallel"], "pp": 4, "virtual_stages": 2, "schedule": "interleaved"}
    config = eval_config(saved, [], 1)
    assert (config.parallel.tp, config.parallel.pp, config.parallel.virtual_stages) == (1, 1, 1)


def test_forwarded_arguments_reparse_to_the_same_command():
    from trident.commands.evaluate import add_arguments, forwarded_argv

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["run/checkpoints", "parallel.tp=2", "--nproc", "4", "--tasks", "piqa,lambada", "--shots", "0,5",
            "--data-dir", "data", "--out", "o", "--limit", "7", "--seed", "3", "--bias", "--log-samples",
            "--contamination-corpus", "a.jsonl", "b.jsonl", "--dtype", "bf16", "--batch-size", "5", "--json",
            "--fewshot-seeds", "3", "--fewshot-construction", "per-document"]
    protocol = ["run/checkpoints", "parallel.pp=2", "--nproc", "2", "--protocol", "mtnlg", "--out", "o"]
    for command in (argv, protocol):
        args = parser.parse_intermixed_args(command)
        again = parser.parse_intermixed_args(forwarded_argv(args)[1:])
        assert vars(again) == {**vars(args), "nproc": 1}
