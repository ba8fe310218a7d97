"""A tiny GPT trained on a synthetic fact corpus beats chance on tasks built from those facts
(LAMBADA-style last word, PIQA-format two-way choice); the same model untrained does not."""
from __future__ import annotations

import json
import random

import pytest
import torch

from eval_fixtures import tiny_model, train_plain_loop
from trident.data.tokenizer import train_tokenizer
from trident.evaluate.harness import run_evaluation
from trident.evaluate.lm import trident_lm

NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar"]
COLORS = ["red", "blue", "green", "black", "white", "pink", "gray", "brown", "gold", "silver", "orange", "purple"]
FACTS = dict(zip(NAMES, COLORS))


def corpus_lines(rng: random.Random, n: int) -> list[str]:
    lines = []
    for _ in range(n):
        name = rng.choice(NAMES)
        if rng.random() < 0.5:
            lines.append(f"the car of {name} is {FACTS[name]}")
        else:
            lines.append(f"Question: what color is the car of {name}?\nAnswer: {FACTS[name]}")
    return lines


def write_tasks(root):
    (root / "lambada").mkdir(parents=True)
    (root / "piqa").mkdir()
    with (root / "lambada" / "lambada_test.jsonl").open("w") as f:
        for name in NAMES:
            f.write(json.dumps({"text": f"the car of {name} is {FACTS[name]}"}) + "\n")
    rng = random.Random(0)
    rows, labels = [], []
    for name in NAMES:
        wrong = rng.choice([c for c in COLORS if c != FACTS[name]])
        label = rng.randrange(2)
        sols = [wrong, wrong]
        sols[label] = FACTS[name]
        rows.append({"goal": f"what color is the car of {name}?", "sol1": sols[0], "sol2": sols[1]})
        labels.append(label)
    for split in ("train", "valid"):
        (root / "piqa" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (root / "piqa" / f"{split}-labels.lst").write_text("".join(f"{y}\n" for y in labels))


@pytest.mark.timeout(240)
def test_trained_model_beats_chance_and_untrained_does_not(tmp_path):
    lines = corpus_lines(random.Random(1), 600)
    (tmp_path / "corpus.txt").write_text("\n".join(lines))
    tokenizer = train_tokenizer([tmp_path / "corpus.txt"], 300, tmp_path / "tok.json")
    write_tasks(tmp_path / "data")
    torch.manual_seed(0)
    untrained, _ = tiny_model(tokenizer, seq_length=64, seed=0, layers=2, hidden=64)
    before = run_evaluation(trident_lm(untrained, tokenizer, 64), ["lambada", "piqa"], [0], tmp_path / "data",
                            None, progress=False)["results"]
    trained, _ = tiny_model(tokenizer, seq_length=64, seed=0, layers=2, hidden=64)
    final_loss = train_plain_loop(trained, tokenizer, lines)
    after = run_evaluation(trident_lm(trained, tokenizer, 64), ["lambada", "piqa"], [0], tmp_path / "data",
                           None, progress=False)["results"]
    assert final_loss < 1.0
    assert after["lambada"]["0"]["metrics"]["acc"] >= 0.9
    assert after["piqa"]["0"]["metrics"]["acc"] >= 0.9
    assert after["lambada"]["0"]["metrics"]["perplexity"] < 2.0
    assert before["lambada"]["0"]["metrics"]["acc"] <= 0.2
    assert before["piqa"]["0"]["metrics"]["acc"] <= 0.75
    assert before["lambada"]["0"]["metrics"]["perplexity"] > 50
