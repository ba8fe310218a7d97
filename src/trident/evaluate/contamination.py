"""Contamination-aware scores: which scored examples share an n-gram with the training corpus.

Follows GPT-3 (appendix C) with the word n-grams that trident's decontamination stage uses
(trident.text.ngrams: lower-cased `\\w+` words, xxh3 word hashes, 13-grams, texts shorter than
13 words use all their words, under 8 words are never flagged): an example is
"dirty" when any n-gram of its prompt text plus choices occurs in any training document. The
report gives, per task and shot count, the dirty fraction and every metric on the clean subset,
so a score that rests on memorised test data shows up as a gap between the two.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from trident.tasks import Task
from trident.text.jsonl import DEFAULT_MAX_DOC_BYTES, iter_texts
from trident.text.ngrams import ngram_hashes, word_hashes, words_of
from trident.text.storage import location


def example_text(task: Task, doc: dict) -> str:
    """What the model is shown and scored on for one example: the prompt and every choice."""
    return "\n".join([task.doc_to_text(doc), *task.doc_to_choices(doc)])


def text_ngrams(text: str, ngram: int, min_ngram: int) -> np.ndarray:
    """n-gram hashes of a text (n = min(ngram, words)); empty for texts under min_ngram words."""
    words = words_of(text)
    if len(words) < min_ngram:
        return np.zeros(0, dtype=np.uint64)
    return ngram_hashes(word_hashes(words), min(ngram, len(words)))


def training_texts(paths: list[Path], counters: Counter, key: str = "text"):
    """Texts of the training files (.jsonl[.gz|.zst] records, else plain text); bad lines counted."""
    for path in paths:
        if not location(path).is_file():
            raise FileNotFoundError(f"contamination corpus file {path} not found")
        yield from iter_texts(path, key, counters, max_line_bytes=DEFAULT_MAX_DOC_BYTES)


def find_dirty(examples: dict[str, list[str]], corpus: list[Path], ngram: int = 13, min_ngram: int = 8,
               key: str = "text") -> tuple[dict[str, list[bool]], dict]:
    """Per task, a dirty flag per example text; plus scan statistics (documents, bad lines)."""
    per_example = {task: [text_ngrams(t, ngram, min_ngram) for t in texts] for task, texts in examples.items()}
    sizes = sorted({min(ngram, len(words_of(t))) for texts in examples.values() for t in texts
                    if len(words_of(t)) >= min_ngram})
    wanted = np.unique(np.concatenate([g for grams in per_example.values() for g in grams] +
                                      [np.zeros(0, dtype=np.uint64)]))
    found: set[int] = set()
    counters: Counter = Counter()
    for text in training_texts(corpus, counters, key):
        counters["documents"] += 1
        hashes = word_hashes(words_of(text))
        for n in sizes:
            grams = ngram_hashes(hashes, n)
            found.update(grams[np.isin(grams, wanted)].tolist())
    seen = np.fromiter(found, dtype=np.uint64, count=len(found))
    flags = {task: [bool(np.isin(g, seen).any()) for g in grams] for task, grams in per_example.items()}
    stats = {"ngram": ngram, "min_ngram": min_ngram, "corpus": [str(p) for p in corpus], **counters}
    return flags, stats


def clean_report(task: Task, per_example: list[dict[str, float]], dirty: list[bool], stats: dict) -> dict:
    """The entry stored under results[task][shots]["contamination"]."""
    clean = [m for m, d in zip(per_example, dirty) if not d]
    values, errors = task.aggregate(clean) if clean else ({}, {})
    return {
        "dirty": sum(dirty),
        "fraction_dirty": sum(dirty) / len(dirty) if dirty else float("nan"),
        "clean_n": len(clean),
        "clean_metrics": values,
        "clean_stderr": errors,
        "ngram": stats["ngram"],
    }
