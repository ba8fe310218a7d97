"""SuperGLUE tasks MT-NLG reports: BoolQ, RTE, WiC (prompts of lm-evaluation-harness).

Files (the SuperGLUE release, one JSON object per line): BoolQ/{train,val}.jsonl with
{"question", "passage", "label": true|false}; RTE/{train,val}.jsonl with {"premise", "hypothesis",
"label": "entailment"|"not_entailment"}; WiC/{train,val}.jsonl with {"sentence1", "sentence2",
"start1", "end1", "label": true|false} (the target word is sentence1[start1:end1]).
Scored on val (the test files have no labels); few-shot examples from train.
"""
from __future__ import annotations

from pathlib import Path

from trident.tasks.base import MultipleChoiceTask, label_index
from trident.tasks.files import INT, LABEL, TEXT, Kind, read_jsonl


class _SuperGLUETask(MultipleChoiceTask):
    eval_split = "validation"
    fewshot_splits = ("train",)
    keys: dict[str, Kind] = {}  # the fields a document keeps, with their types
    labels: dict = {}

    def split_files(self, split):
        return {"train": ["train.jsonl"], "validation": ["val.jsonl"]}.get(split)

    def read_split(self, root: Path, split: str) -> list[dict]:
        path = root / self.split_files(split)[0]
        docs = []
        for where, r in read_jsonl(path, self.name, self.expected, self.keys | {"label": LABEL}):
            docs.append({k: r[k] for k in self.keys} | {"label": label_index(r["label"], self.labels, self.name, where)})
        return docs

    def from_hub(self, row):
        return {k: row[k] for k in self.keys} | {"label": self.hub_label(int(row["label"]))}

    def hub_label(self, label: int) -> int:
        return label

    def doc_to_gold(self, doc):
        return doc["label"]


class BoolQ(_SuperGLUETask):
    name = "boolq"
    folder = "BoolQ"
    expected = 'BoolQ/{train,val}.jsonl with {"question", "passage", "label": true|false} per line (SuperGLUE)'
    hub = ("aps/super_glue", "boolq")
    hub_splits = {"train": "train", "validation": "validation"}
    keys = {"question": TEXT, "passage": TEXT}
    labels = {False: 0, True: 1}

    def doc_to_text(self, doc):
        return f"{doc['passage']}\nQuestion: {doc['question']}?\nAnswer:"

    def doc_to_choices(self, doc):
        return ["no", "yes"]


class RTE(_SuperGLUETask):
    name = "rte"
    folder = "RTE"
    expected = ('RTE/{train,val}.jsonl with {"premise", "hypothesis", '
                '"label": "entailment"|"not_entailment"} per line (SuperGLUE)')
    hub = ("aps/super_glue", "rte")
    hub_splits = {"train": "train", "validation": "validation"}
    keys = {"premise": TEXT, "hypothesis": TEXT}
    labels = {"entailment": 0, "not_entailment": 1}

    def doc_to_text(self, doc):
        return f"{doc['premise']}\nQuestion: {doc['hypothesis']} True or False?\nAnswer:"

    def doc_to_choices(self, doc):
        return ["True", "False"]


class WiC(_SuperGLUETask):
    name = "wic"
    folder = "WiC"
    expected = ('WiC/{train,val}.jsonl with {"sentence1", "sentence2", "start1", "end1", '
                '"label": true|false} per line (SuperGLUE)')
    hub = ("aps/super_glue", "wic")
    hub_splits = {"train": "train", "validation": "validation"}
    keys = {"sentence1": TEXT, "sentence2": TEXT, "start1": INT, "end1": INT}
    labels = {False: 0, True: 1}

    def doc_to_text(self, doc):
        word = doc["sentence1"][doc["start1"]: doc["end1"]]
        return (f"Sentence 1: {doc['sentence1']}\nSentence 2: {doc['sentence2']}\n"
                f"Question: Is the word '{word}' used in the same way in the two sentences above?\nAnswer:")

    def doc_to_choices(self, doc):
        return ["no", "yes"]
