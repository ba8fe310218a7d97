"""LAMBADA (OpenAI detokenised version): predict the last word of a passage.

File: lambada/lambada_test.jsonl, one {"text": "..."} per line (the file GPT-2/GPT-3 and
lm-evaluation-harness's lambada_openai use). Prompt: the text up to its last space; continuation:
" " + last word (target delimiter ""). acc = every token of the last word is the greedy argmax;
perplexity = exp(-mean summed log-likelihood of the last word), as the harness reports it.
The file has only a test split, so few-shot examples come from the same file. Under the harness's
few-shot construction a shot is "context" + " " + " word" (its default target delimiter before a
target that starts with a space: two spaces) and the scored passage may be among its own examples,
because the harness config names a test split; trident's per-document construction writes one space
and never shows the scored passage.
"""
from __future__ import annotations

from pathlib import Path

from trident.tasks.base import Task
from trident.tasks.files import TEXT, TaskDataError, read_jsonl
from trident.tasks.generation import GenerationTask
from trident.tasks.metrics import bootstrap_stderr, mean, mean_stderr, perplexity
from trident.tasks.types import Loglikelihood

EXPECTED = 'lambada/lambada_test.jsonl: one JSON object {"text": "..."} per line (OpenAI LAMBADA)'


class Lambada(Task):
    name = "lambada"
    folder = "lambada"
    eval_split = "test"
    fewshot_splits = ()
    target_delimiter = ""
    expected = EXPECTED
    hub = ("EleutherAI/lambada_openai", "default")
    hub_splits = {"test": "test"}
    metric_names = ("acc", "perplexity")
    harness_excludes_scored_doc = False

    def split_files(self, split):
        return ["lambada_test.jsonl"] if split == "test" else None

    def read_split(self, root: Path, split: str) -> list[dict]:
        path = root / "lambada_test.jsonl"
        docs = []
        for where, record in read_jsonl(path, self.name, EXPECTED, {"text": TEXT}):
            text = record["text"]
            if " " not in text.strip():
                raise TaskDataError(f"{self.name}: {where}: field 'text' has no last word to predict")
            docs.append({"text": text})
        return docs

    def from_hub(self, row):
        return {"text": row["text"]}

    def doc_to_text(self, doc):
        return doc["text"].rsplit(" ", 1)[0]

    def doc_to_choices(self, doc):
        return [" " + doc["text"].rsplit(" ", 1)[1]]

    def doc_to_gold(self, doc):
        return 0

    def harness_shot(self, doc):
        return self.doc_to_text(doc) + " " + self.doc_to_choices(doc)[0]

    def score(self, doc, results: list[Loglikelihood]):
        (result,) = results
        return {"acc": float(result.is_greedy), "loglik": result.logprob}

    def aggregate(self, per_example):
        accs = [e["acc"] for e in per_example]
        logliks = [e["loglik"] for e in per_example]
        values = {"acc": mean(accs), "perplexity": perplexity(logliks)}
        errors = {"acc": mean_stderr(accs), "perplexity": bootstrap_stderr(logliks, perplexity, iters=200)}
        return values, errors


class LambadaCloze(Lambada):
    """GPT-3's fill-in-the-blank LAMBADA format (lm-evaluation-harness lambada_openai_cloze):
    "{text minus last word} ____. ->" followed by " {last word}". GPT-3 and MT-NLG used it for the
    few-shot LAMBADA numbers, where the examples teach the model that one word is wanted."""

    name = "lambada_cloze"

    def doc_to_text(self, doc):
        return super().doc_to_text(doc) + " ____. ->"


class LambadaGeneration(GenerationTask, Lambada):
    """LAMBADA as generation: the model writes on from the passage minus its last word; the first
    whitespace-delimited word it writes (the harness's `regex` filter on (\\S+), "[invalid]" when it
    writes none) must equal the last word, punctuation ignored, case kept; F1 as tasks/generation.py.
    Few-shot examples as `lambada` under the harness construction ("context" + " " + "word")."""

    name = "lambada_gen"
    until = ("\n",)
    max_new_tokens = 16  # a word: generations are cut after their first word anyway
    ignore_case = False
    answer_pattern = r"(\S+)"

    def doc_to_targets(self, doc):
        return [doc["text"].rsplit(" ", 1)[1]]

    def harness_shot(self, doc):
        return self.doc_to_text(doc) + " " + self.doc_to_targets(doc)[0]

    def aggregate(self, per_example):
        return Task.aggregate(self, per_example)  # means of exact_match and f1, not Lambada's perplexity
