"""End to end through the command line: tokenizer -> tokenize -> train -> generate, on tiny data."""
import json

import pytest

from trident.cli import main


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    from trident.data.stdlib_corpus import build_stdlib_corpus

    build_stdlib_corpus(root / "corpus.jsonl", max_docs=150)
    assert main(["tokenizer", "train", "--input", str(root / "corpus.jsonl"), "--vocab-size", "400",
                 "--out", str(root / "tok.json")]) == 0
    assert main(["tokenize", "--input", str(root / "corpus.jsonl"), "--output-prefix", str(root / "data"),
                 "--tokenizer", str(root / "tok.json")]) == 0
    return root


@pytest.mark.timeout(240)
def test_train_learns_and_writes_metrics_config_and_checkpoint(corpus, capsys):
    out = corpus / "run"
    code = main(["train", "tiny", f"data.paths=[{corpus / 'data'}]", f"data.tokenizer={corpus / 'tok.json'}",
                 "train.steps=40", "train.eval_interval=20", "train.eval_iters=2", "--out", str(out), "--json"])
    assert code == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    keys = {"step", "loss", "lr", "grad_norm", "batch_size", "tokens", "tokens_per_s", "tflops", "mfu",
            "skipped", "loss_scale"}
    assert len(records) == 40 and all(keys <= set(r) for r in records)
    first, last = sum(r["loss"] for r in records[:5]) / 5, sum(r["loss"] for r in records[-5:]) / 5
    assert last < first - 0.5  # it learns
    assert records[19]["val_loss"] is not None and records[-1]["mfu"] > 0
    assert (out / "config.yaml").exists() and (out / "checkpoints" / "step_0000040" / "COMPLETE").exists()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 40
    assert main(["generate", str(out), "--prompt", "Return the", "--max-new-tokens", "8", "--greedy"]) == 0


def test_train_refuses_bad_config_at_start(corpus, capsys):
    assert main(["train", "tiny", "train.nope=1", "--out", str(corpus / "bad")]) == 2
    assert "unknown config key 'train.nope'" in capsys.readouterr().err
    assert main(["train", "tiny", "parallel.tp=2", "--out", str(corpus / "bad")]) == 2  # 1 process, tp 2
    assert not (corpus / "bad").exists()


def test_help_lists_every_command(capsys):
    assert main([]) == 0
    text = capsys.readouterr().out
    for command in ("demo", "train", "tokenize", "tokenizer", "generate", "curate", "eval", "plan",
                    "pipeline-diagram", "export-hf", "import-hf"):
        assert command in text


def test_train_refuses_data_that_does_not_fit_the_model_or_tokenizer(corpus, capsys):
    # ids up to the tokenizer's 400 do not fit a 128-token model: with TP > 1 they trained silently
    data, tok = f"data.paths=[{corpus / 'data'}]", f"data.tokenizer={corpus / 'tok.json'}"
    assert main(["train", "tiny", data, tok, "model.vocab_size=128", "--out", str(corpus / "small")]) == 2
    err = capsys.readouterr().err
    assert str(corpus / "data") in err and "model.vocab_size=128" in err
    from trident.data.tokenizer import train_tokenizer

    train_tokenizer([corpus / "corpus.jsonl"], 300, corpus / "other.json")
    assert main(["train", "tiny", data, f"data.tokenizer={corpus / 'other.json'}",
                 "--out", str(corpus / "other")]) == 2
    assert "was tokenized with another tokenizer than the model" in capsys.readouterr().err


def test_train_refuses_to_reuse_an_output_folder_unless_resuming_or_overwriting(corpus, capsys):
    out = corpus / "reuse"
    base = ["train", "tiny", f"data.paths=[{corpus / 'data'}]", f"data.tokenizer={corpus / 'tok.json'}",
            "train.steps=2", "--out", str(out)]
    assert main(base) == 0
    metrics = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(base) == 2  # a second fresh run used to truncate metrics.jsonl and replace step_N
    assert "not empty" in capsys.readouterr().err and (out / "metrics.jsonl").read_text() == metrics
    assert main(base + ["train.steps=3", "checkpoint.load=auto"]) == 0  # a resume of the same run
    assert "resumed from" in capsys.readouterr().out
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert main(base + ["model.hidden_size=64", "checkpoint.load=auto"]) == 2  # another model is no resume
    (out / "notes.txt").write_text("mine")
    assert main(base + ["--overwrite", "checkpoint.load=auto"]) == 0  # a fresh run: the old one is gone
    assert "resumed from" not in capsys.readouterr().out
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2 and (out / "notes.txt").read_text() == "mine"
    assert not (out / "checkpoints" / "step_0000003").exists()
    foreign = corpus / "foreign"
    foreign.mkdir()
    (foreign / "results.csv").write_text("keep")
    assert main(["train", "tiny", "--out", str(foreign)]) == 2
    assert "files trident did not write: results.csv" in capsys.readouterr().err
