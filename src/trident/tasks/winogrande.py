"""WinoGrande: fill a blank with one of two names, scored by partial evaluation.

Files (winogrande_1.1 as published): winogrande/train_xl.jsonl and winogrande/dev.jsonl, one
{"sentence" (with one "_"), "option1", "option2", "answer": "1"|"2"} per line.
Partial scoring (Trinh & Le 2018; GPT-3; lm-evaluation-harness): each option is put into the
context, `sentence[:blank] + option`, and the shared rest of the sentence, " " + the text after
the blank (stripped), is the scored continuation; the option whose context makes it likelier wins.
"""
from __future__ import annotations

from pathlib import Path

from trident.tasks.base import Task, label_index
from trident.tasks.files import LABEL, TEXT, TaskDataError, read_jsonl
from trident.tasks.metrics import argmax
from trident.tasks.types import Loglikelihood

EXPECTED = ('winogrande/{train_xl,dev}.jsonl with {"sentence" containing "_", "option1", "option2", '
            '"answer": "1" or "2"} per line (winogrande_1.1)')


class WinoGrande(Task):
    name = "winogrande"
    folder = "winogrande"
    eval_split = "validation"
    fewshot_splits = ("train",)
    expected = EXPECTED
    hub = ("allenai/winogrande", "winogrande_xl")
    hub_splits = {"train": "train", "validation": "validation"}
    train_size = "xl"  # train_{xs,s,m,l,xl}.jsonl; xl is the full training set

    def split_files(self, split):
        return {"train": [f"train_{self.train_size}.jsonl"], "validation": ["dev.jsonl"]}.get(split)

    def read_split(self, root: Path, split: str) -> list[dict]:
        path = root / self.split_files(split)[0]
        docs = []
        fields = {"sentence": TEXT, "option1": TEXT, "option2": TEXT, "answer": LABEL}
        for where, r in read_jsonl(path, self.name, EXPECTED, fields):
            if r["sentence"].count("_") != 1:
                raise TaskDataError(f"{self.name}: {where}: field 'sentence' must contain exactly one '_'")
            label = label_index(str(r["answer"]), {"1": 0, "2": 1}, self.name, where)
            docs.append({"sentence": r["sentence"], "option1": r["option1"], "option2": r["option2"], "label": label})
        return docs

    def from_hub(self, row):
        return {"sentence": row["sentence"], "option1": row["option1"], "option2": row["option2"],
                "label": int(row["answer"]) - 1}

    def partial_contexts(self, doc) -> list[str]:
        blank = doc["sentence"].index("_")
        return [doc["sentence"][:blank] + option for option in self.doc_to_choices(doc)]

    def target(self, doc) -> str:
        return doc["sentence"][doc["sentence"].index("_") + 1:].strip()

    def doc_to_text(self, doc):
        return doc["sentence"]

    def doc_to_choices(self, doc):
        return [doc["option1"], doc["option2"]]

    def doc_to_gold(self, doc):
        return doc["label"]

    def fewshot_example(self, doc):
        return self.partial_contexts(doc)[doc["label"]] + self.target_delimiter + self.target(doc)

    def requests(self, doc, prefix):
        continuation = self.target_delimiter + self.target(doc)
        return [(prefix + context, continuation) for context in self.partial_contexts(doc)]

    def score(self, doc, results: list[Loglikelihood]):
        return {"acc": float(argmax([r.logprob for r in results]) == doc["label"])}
