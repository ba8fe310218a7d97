"""Evaluation tasks built from held-out text, written in the published formats the tasks read.

For `trident demo` (and any corpus without downloaded benchmarks): from documents the model never
trained on, build
- a LAMBADA-style task (`lambada/lambada_test.jsonl`): passages of up to `passage_words` words
  that end on a word of >= 3 letters, to be predicted from the rest;
- a multiple-choice continuation task in HellaSwag's format (`hellaswag/hellaswag_{train,val}.jsonl`):
  the start of a passage, the true next `ending_words` words, and 3 spans of the same length taken
  from other documents; chance is 25%.
Then `run_evaluation(lm, ["lambada", "hellaswag"], shots, out_dir, ...)` scores them. A model that
learned the corpus's language beats chance on both; an untrained one does not.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

_WORD = re.compile(r"^[A-Za-z]{3,}$")


def _passages(texts: list[str], words_per_passage: int) -> list[list[str]]:
    """Consecutive word windows of each document (whitespace words, punctuation kept)."""
    out = []
    for text in texts:
        words = text.split()
        for start in range(0, len(words) - words_per_passage + 1, words_per_passage):
            out.append(words[start: start + words_per_passage])
    return out


def lambada_records(texts: list[str], n: int, passage_words: int, rng: random.Random) -> list[dict]:
    """Passages cut so the last word is alphabetic (>= 3 letters), as LAMBADA's targets are."""
    records = []
    for words in _passages(texts, passage_words):
        end = max((i for i, w in enumerate(words) if _WORD.match(w) and i >= passage_words // 2), default=None)
        if end is not None:
            records.append({"text": " ".join(words[: end + 1])})
    rng.shuffle(records)
    return records[:n]


def continuation_records(texts: list[str], n: int, context_words: int, ending_words: int,
                         rng: random.Random) -> list[dict]:
    """HellaSwag-format records: true ending at a random position among 3 endings from other passages."""
    spans = [(doc, w) for doc, text in enumerate(texts) for w in _passages([text], context_words + ending_words)]
    if len({doc for doc, _ in spans}) < 2:
        raise ValueError("need passages from at least 2 documents to draw wrong endings from other documents")
    rng.shuffle(spans)
    records = []
    for doc, words in spans[:n]:
        others = [w for d, w in spans if d != doc]
        wrong = [" ".join(rng.choice(others)[context_words:]) for _ in range(3)]
        label = rng.randrange(4)
        endings = wrong[:label] + [" ".join(words[context_words:])] + wrong[label:]
        records.append({"activity_label": "Text", "ctx_a": " ".join(words[:context_words]), "ctx_b": "",
                        "endings": endings, "label": label, "source_id": f"heldout~{doc}"})
    return records


def write_heldout_tasks(texts: list[str], out_dir: str | Path, n_examples: int = 64, seed: int = 0,
                        passage_words: int = 40, context_words: int = 24, ending_words: int = 8) -> dict:
    """Write OUT/lambada/lambada_test.jsonl and OUT/hellaswag/hellaswag_{val,train}.jsonl; return counts.

    The first half of the documents feeds the scored split, the second half the few-shot split, so
    a few-shot example never comes from the document being scored.
    """
    texts = [t for t in texts if t.strip()]
    if len(texts) < 4:
        raise ValueError(f"need at least 4 non-empty held-out documents, got {len(texts)}")
    rng = random.Random(seed)
    half = len(texts) // 2
    out = Path(out_dir)
    lambada = lambada_records(texts, n_examples, passage_words, rng)
    scored = continuation_records(texts[:half], n_examples, context_words, ending_words, rng)
    shots = continuation_records(texts[half:], n_examples, context_words, ending_words, rng)
    for name, records in (("lambada/lambada_test.jsonl", lambada), ("hellaswag/hellaswag_val.jsonl", scored),
                          ("hellaswag/hellaswag_train.jsonl", shots)):
        if not records:
            raise ValueError(f"held-out text too short to build {name}: documents need >= "
                             f"{max(passage_words, context_words + ending_words)} words")
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return {"lambada": len(lambada), "hellaswag": len(scored), "hellaswag_fewshot": len(shots), "dir": str(out)}
