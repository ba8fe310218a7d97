"""Held-out tasks for the demo: written in the published formats, read back by the task readers,
and a model trained on the text's language beats chance on them while an untrained one does not."""
from __future__ import annotations

import random

import pytest
import torch

from eval_fixtures import tiny_model
from eval_fixtures import train_plain_loop
from trident.data.tokenizer import train_tokenizer
from trident.evaluate.harness import run_evaluation
from trident.evaluate.heldout import write_heldout_tasks
from trident.evaluate.lm import trident_lm
from trident.tasks import get_task

SUBJECTS = ["the cat", "the dog", "a bird", "the farmer", "my sister", "the teacher"]
# the object depends on the verb, so a true continuation is grammatical where a spliced one is not
# objects of 1-3 words, so passage windows start at varying points of a sentence
OBJECTS = {"eats": ["an apple", "bread", "some warm soup"], "wears": ["a hat", "boots", "a red coat"],
           "throws": ["the ball", "stones", "a long stick"], "reads": ["a book", "letters", "the daily news"]}


def documents(rng: random.Random, n: int) -> list[str]:
    def sentence():
        verb = rng.choice(list(OBJECTS))
        return f"{rng.choice(SUBJECTS)} {verb} {rng.choice(OBJECTS[verb])} ."
    return [" ".join(sentence() for _ in range(30)) for _ in range(n)]


def test_written_files_read_back_with_the_true_ending_where_the_label_says(tmp_path):
    texts = documents(random.Random(0), 8)
    counts = write_heldout_tasks(texts, tmp_path, n_examples=10, seed=1)
    assert counts["lambada"] == 10 and counts["hellaswag"] == 10
    lam = get_task("lambada").load(tmp_path, "test")
    assert all(doc["text"].rsplit(" ", 1)[1].isalpha() for doc in lam)
    hs = get_task("hellaswag")
    for doc in hs.load(tmp_path, "validation"):
        context, truth = doc["ctx_a"], doc["endings"][doc["label"]]
        assert any(context + " " + truth in " ".join(t.split()) for t in texts[:4])
    assert write_heldout_tasks(texts, tmp_path / "again", n_examples=10, seed=1) == counts | {"dir": str(tmp_path / "again")}
    with pytest.raises(ValueError, match="at least 4"):
        write_heldout_tasks(texts[:2], tmp_path / "x")


@pytest.mark.timeout(240)
def test_trained_model_beats_chance_on_heldout_tasks(tmp_path):
    rng = random.Random(0)
    train_docs, heldout = documents(rng, 40), documents(rng, 16)
    (tmp_path / "corpus.txt").write_text("\n".join(train_docs))
    tokenizer = train_tokenizer([tmp_path / "corpus.txt"], 300, tmp_path / "tok.json")
    write_heldout_tasks(heldout, tmp_path / "data", n_examples=24, seed=0, passage_words=30, context_words=12,
                        ending_words=6)
    torch.manual_seed(0)
    scores = {}
    for label, steps in (("untrained", 0), ("trained", 60)):
        model, _ = tiny_model(tokenizer, seq_length=64, seed=0, layers=2, hidden=64)
        if steps:
            train_plain_loop(model, tokenizer, train_docs, steps=steps, seq=32)
        results = run_evaluation(trident_lm(model, tokenizer, 64), ["lambada", "hellaswag"], [0], tmp_path / "data",
                                 None, progress=False)["results"]
        scores[label] = {t: results[t]["0"]["metrics"] for t in results}
    assert scores["trained"]["hellaswag"]["acc"] >= 0.6  # chance 0.25
    assert scores["untrained"]["hellaswag"]["acc"] <= 0.5
    assert scores["trained"]["lambada"]["perplexity"] < scores["untrained"]["lambada"]["perplexity"] / 10
