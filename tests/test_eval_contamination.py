"""Contamination-aware scores: examples whose n-grams occur in the training corpus are flagged and
the metrics are recomputed on the clean subset."""
from __future__ import annotations

import json

import pytest

from eval_fixtures import FIXTURES, tiny_lm, tiny_tokenizer
from trident.cli import main
from trident.evaluate.contamination import find_dirty
from trident.evaluate.harness import run_evaluation


def test_find_dirty_flags_shared_ngrams_only(tmp_path):
    corpus = tmp_path / "train.jsonl"
    leaked = "the quick brown fox jumps over the lazy dog near the old river bank today"
    corpus.write_text(json.dumps({"text": "Some prefix. The Quick, brown fox jumps over the lazy dog near the "
                                           "old river bank TODAY and more."}) + "\n" + "{broken\n"
                      + json.dumps({"text": "unrelated words about nothing in particular at all here"}) + "\n")
    examples = {"t": [leaked, "a different sentence with enough words to make one n-gram here", "too short"]}
    flags, stats = find_dirty(examples, [corpus], ngram=13, min_ngram=8)
    assert flags == {"t": [True, False, False]}
    assert stats["documents"] == 2 and stats["skipped_lines:malformed_json"] == 1
    # a text shorter than 13 words is matched on all its words (8..12-grams)
    short = "jumps over the lazy dog near the old river"
    assert find_dirty({"t": [short]}, [corpus])[0] == {"t": [True]}


def test_clean_subset_scores_in_results(tmp_path):
    # the corpus holds PIQA validation example 1's prompt and first solution verbatim
    corpus = tmp_path / "train.jsonl"
    corpus.write_text(json.dumps({"text": "Question: Clean a window\nAnswer: rub it with mud. wipe it with soapy "
                                          "water."}) + "\n")
    lm = tiny_lm(tiny_tokenizer(tmp_path), seq_length=128)
    results = run_evaluation(lm, ["piqa"], [0], FIXTURES, tmp_path / "out", log_samples=True, progress=False,
                             contamination_corpus=[corpus])
    entry = results["results"]["piqa"]["0"]
    report = entry["contamination"]
    assert report["dirty"] == 1 and report["clean_n"] == 2 and report["fraction_dirty"] == pytest.approx(1 / 3)
    samples = [json.loads(x) for x in (tmp_path / "out" / "samples" / "piqa_0shot.jsonl").read_text().splitlines()]
    assert [s["dirty"] for s in samples] == [False, True, False]
    clean_acc = (samples[0]["metrics"]["acc"] + samples[2]["metrics"]["acc"]) / 2
    assert report["clean_metrics"]["acc"] == pytest.approx(clean_acc)
    assert results["contamination"]["documents"] == 1


def test_cli_prints_the_contamination_line(tmp_path, capsys):
    from eval_fixtures import save_trident_checkpoint

    tokenizer = tiny_tokenizer(tmp_path)
    ckpt, _ = save_trident_checkpoint(tokenizer, tmp_path)
    corpus = tmp_path / "train.jsonl"
    corpus.write_text(json.dumps({"text": "The dog barked at the mailman every morning. The mailman was afraid of "
                                          "the dog"}) + "\n")
    assert main(["eval", str(ckpt), "--tasks", "lambada", "--data-dir", str(FIXTURES),
                 "--contamination-corpus", str(corpus)]) == 0
    assert "contamination lambada 0-shot: 1/4 examples share a 13-gram" in capsys.readouterr().out
