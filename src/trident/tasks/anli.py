"""Adversarial NLI rounds 1-3 (ANLI), prompt of lm-evaluation-harness.

Files (anli_v1.0 as published): anli/R1/{train,dev,test}.jsonl (R2, R3 alike), one
{"context", "hypothesis", "label": "e"|"n"|"c"} per line. Prompt
"{context}\nQuestion: {hypothesis} True, False, or Neither?\nAnswer:" -> True / Neither / False
(entailment / neutral / contradiction). Scored on test, few-shot examples from train.
"""
from __future__ import annotations

from pathlib import Path

from trident.tasks.base import MultipleChoiceTask, label_index
from trident.tasks.files import LABEL, TEXT, read_jsonl

LABELS = {"e": 0, "n": 1, "c": 2}


class ANLI(MultipleChoiceTask):
    folder = "anli"
    eval_split = "test"
    fewshot_splits = ("train", "validation")
    harness_excludes_scored_doc = False  # the harness config names a test split
    round = 1

    def __init__(self, round: int = 1):
        self.round = round
        self.name = f"anli_r{round}"
        self.expected = (f'anli/R{round}/{{train,dev,test}}.jsonl with {{"context", "hypothesis", '
                         f'"label": "e"|"n"|"c"}} per line (anli_v1.0)')
        self.hub = ("facebook/anli", None)
        self.hub_splits = {"train": f"train_r{round}", "validation": f"dev_r{round}", "test": f"test_r{round}"}

    def split_files(self, split):
        name = {"train": "train", "validation": "dev", "test": "test"}.get(split)
        return [f"R{self.round}/{name}.jsonl"] if name else None

    def read_split(self, root: Path, split: str) -> list[dict]:
        path = root / self.split_files(split)[0]
        fields = {"context": TEXT, "hypothesis": TEXT, "label": LABEL}
        return [{"premise": r["context"], "hypothesis": r["hypothesis"],
                 "label": label_index(r["label"], LABELS, self.name, where)}
                for where, r in read_jsonl(path, self.name, self.expected, fields)]

    def from_hub(self, row):
        return {"premise": row["premise"], "hypothesis": row["hypothesis"], "label": int(row["label"])}

    def doc_to_text(self, doc):
        return f"{doc['premise']}\nQuestion: {doc['hypothesis']} True, False, or Neither?\nAnswer:"

    def doc_to_choices(self, doc):
        return ["True", "Neither", "False"]

    def doc_to_gold(self, doc):
        return doc["label"]
