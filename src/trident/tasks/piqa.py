"""PIQA: physical commonsense, pick the better of two solutions to a goal.

Files (as published by the PIQA authors): piqa/train.jsonl + train-labels.lst and
piqa/valid.jsonl + valid-labels.lst; each jsonl line {"goal", "sol1", "sol2"}, each labels line 0 or 1.
Prompt "Question: {goal}\nAnswer:" -> " {sol1}" / " {sol2}". Scored on valid (test has no labels).
"""
from __future__ import annotations

from pathlib import Path

from trident.tasks.base import MultipleChoiceTask
from trident.tasks.files import TEXT, TaskDataError, read_jsonl, read_labels

EXPECTED = ('piqa/{train,valid}.jsonl with {"goal", "sol1", "sol2"} per line and '
            "piqa/{train,valid}-labels.lst with one label (0 or 1) per line")
FILES = {"train": ("train.jsonl", "train-labels.lst"), "validation": ("valid.jsonl", "valid-labels.lst")}


class PIQA(MultipleChoiceTask):
    name = "piqa"
    folder = "piqa"
    eval_split = "validation"
    fewshot_splits = ("train",)
    expected = EXPECTED
    hub = ("baber/piqa", None)  # ybisk/piqa needs a loading script; this copy is script-free
    hub_splits = {"train": "train", "validation": "validation"}

    def split_files(self, split):
        return list(FILES[split]) if split in FILES else None

    def read_split(self, root: Path, split: str) -> list[dict]:
        data_name, labels_name = FILES[split]
        records = [r for _, r in read_jsonl(root / data_name, self.name, EXPECTED,
                                            {"goal": TEXT, "sol1": TEXT, "sol2": TEXT})]
        labels = read_labels(root / labels_name, self.name, EXPECTED, len(records))
        for i, label in enumerate(labels, 1):
            if label not in (0, 1):
                raise TaskDataError(f"{self.name}: {root / labels_name}:{i}: label {label} is not 0 or 1")
        return [{"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"], "label": y} for r, y in zip(records, labels)]

    def from_hub(self, row):
        return {"goal": row["goal"], "sol1": row["sol1"], "sol2": row["sol2"], "label": int(row["label"])}

    def doc_to_text(self, doc):
        return f"Question: {doc['goal']}\nAnswer:"

    def doc_to_choices(self, doc):
        return [doc["sol1"], doc["sol2"]]

    def doc_to_gold(self, doc):
        return doc["label"]
