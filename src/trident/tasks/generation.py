"""Generation tasks: the model writes an answer (greedy, cut at stop strings) that is compared with
the reference answers, as lm-evaluation-harness's `generate_until` tasks do.

A generation task's one request per document is (prompt, ""); the harness (evaluate/harness.py)
hands the prompts to `LM.generate_until(prompts, task.until, task.max_new_tokens)` and the texts
back to `score_generation`. The text is post-processed as the harness's filter list says
(`extract`: strip whitespace, or the first regex match with its "[invalid]" fallback), then scored
against every reference, the best reference counting:
- exact_match: the harness's `exact_match` (its port of HF evaluate's) with the task's
  ignore_case / ignore_punctuation: equal strings after lower-casing and deleting ASCII punctuation;
- f1: SQuAD v1.1's token F1 (the answer normalised: lower case, punctuation and the articles a/an/the
  removed, whitespace collapsed), the official TriviaQA scorer's and the harness's (its ReCoRD task's
  squad_f1).
"""
from __future__ import annotations

import re
import string
from collections import Counter

from trident.tasks.base import Task

PUNCTUATION = str.maketrans("", "", string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def exact_match(prediction: str, reference: str, ignore_case: bool, ignore_punctuation: bool) -> float:
    """lm-evaluation-harness's exact_match for one pair."""
    if ignore_case:
        prediction, reference = prediction.lower(), reference.lower()
    if ignore_punctuation:
        prediction, reference = prediction.translate(PUNCTUATION), reference.translate(PUNCTUATION)
    return float(prediction == reference)


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD v1.1's token-overlap F1 of one prediction against one reference (0 without a shared token,
    an empty prediction included, as the official TriviaQA scorer)."""
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    same = sum((Counter(predicted) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


class GenerationTask(Task):
    """A task scored on greedy generations. Subclasses give doc_to_text and doc_to_targets."""

    output_type = "generate_until"
    metric_names = ("exact_match", "f1")
    primary_metric = "exact_match"
    until: tuple[str, ...] = ("\n",)  # generation is cut at the first of these
    max_new_tokens: int = 256  # the harness's default max_gen_toks
    ignore_case: bool = True
    ignore_punctuation: bool = True
    answer_pattern: str | None = None  # a regex whose first match is the answer (harness `regex` filter)

    def doc_to_targets(self, doc: dict) -> list[str]:
        """Every accepted answer (the first one is written in few-shot examples)."""
        raise NotImplementedError

    def doc_to_choices(self, doc: dict) -> list[str]:
        return self.doc_to_targets(doc)

    def doc_to_gold(self, doc: dict) -> int:
        return 0

    def requests(self, doc: dict, prefix: str) -> list[tuple[str, str]]:
        return [(prefix + self.doc_to_text(doc), "")]

    def extract(self, generation: str) -> str:
        """The answer in a generation, as the harness's filters take it."""
        if self.answer_pattern is None:
            return generation.strip()
        found = re.findall(self.answer_pattern, generation)
        return found[0].strip() if found else "[invalid]"

    def score(self, doc, results):
        raise TypeError(f"{self.name} is a generation task: score its generations with score_generation")

    def score_generation(self, doc: dict, generation: str) -> dict[str, float]:
        answer, targets = self.extract(generation), self.doc_to_targets(doc)
        return {"exact_match": max(exact_match(answer, t, self.ignore_case, self.ignore_punctuation) for t in targets),
                "f1": max(token_f1(answer, t) for t in targets)}
