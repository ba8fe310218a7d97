"""HellaSwag: choose the most plausible of four endings.

Files (as published): hellaswag/hellaswag_train.jsonl and hellaswag/hellaswag_val.jsonl, one
{"activity_label", "ctx_a", "ctx_b", "endings": [4 strings], "label": int, ...} per line.
Prompt (lm-evaluation-harness): preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())
-> " " + preprocess(ending), where preprocess strips, turns " [title]" into ". ", drops any other
[bracketed] markup and collapses double spaces. Primary metric acc_norm, as the field reports it.
"""
from __future__ import annotations

import re
from pathlib import Path

from trident.tasks.base import MultipleChoiceTask, label_index
from trident.tasks.files import LABEL, TEXT, read_jsonl, strings

EXPECTED = ('hellaswag/hellaswag_{train,val}.jsonl with {"activity_label", "ctx_a", "ctx_b", '
            '"endings": [4 strings], "label": 0-3} per line')
FILES = {"train": "hellaswag_train.jsonl", "validation": "hellaswag_val.jsonl"}


def preprocess(text: str) -> str:
    """HellaSwag's standard clean-up of WikiHow/ActivityNet markup."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


class HellaSwag(MultipleChoiceTask):
    name = "hellaswag"
    folder = "hellaswag"
    eval_split = "validation"
    fewshot_splits = ("train",)
    expected = EXPECTED
    hub = ("Rowan/hellaswag", None)
    hub_splits = {"train": "train", "validation": "validation"}
    primary_metric = "acc_norm"

    def split_files(self, split):
        return [FILES[split]] if split in FILES else None

    def read_split(self, root: Path, split: str) -> list[dict]:
        path = root / FILES[split]
        docs = []
        fields = {"activity_label": TEXT, "ctx_a": TEXT, "ctx_b": TEXT, "endings": strings(4), "label": LABEL}
        for where, r in read_jsonl(path, self.name, EXPECTED, fields):
            label = label_index(str(r["label"]), {"0": 0, "1": 1, "2": 2, "3": 3}, self.name, where)
            docs.append({k: r[k] for k in ("activity_label", "ctx_a", "ctx_b", "endings")} | {"label": label})
        return docs

    def from_hub(self, row):
        return {k: row[k] for k in ("activity_label", "ctx_a", "ctx_b", "endings")} | {"label": int(row["label"])}

    def doc_to_text(self, doc):
        return preprocess(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())

    def doc_to_choices(self, doc):
        return [preprocess(ending) for ending in doc["endings"]]

    def doc_to_gold(self, doc):
        return doc["label"]
