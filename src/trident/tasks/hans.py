"""HANS: NLI examples built so the shallow heuristics (lexical overlap, subsequence, constituent) fail.

Files (as published by McCoy et al. 2019): hans/heuristics_evaluation_set.txt (scored) and
hans/heuristics_train_set.txt (few-shot examples), tab-separated with a header holding at least
gold_label ("entailment"|"non-entailment"), sentence1, sentence2, heuristic, subcase.
HANS is not in lm-evaluation-harness; the prompt is the harness's two-way NLI prompt (as RTE):
"{sentence1}\nQuestion: {sentence2} True or False?\nAnswer:" -> True / False.
Besides acc it reports acc per heuristic and per heuristic x gold label (acc_<heuristic>_<label>),
since a model leaning on a heuristic scores high on entailed and low on non-entailed examples.
"""
from __future__ import annotations

from pathlib import Path

from trident.tasks.base import MultipleChoiceTask, label_index
from trident.tasks.files import read_tsv
from trident.tasks.types import Loglikelihood

EXPECTED = ("hans/heuristics_{evaluation,train}_set.txt: TSV with header columns gold_label "
            "(entailment|non-entailment), sentence1, sentence2, heuristic, subcase")
LABELS = {"entailment": 0, "non-entailment": 1}
FILES = {"train": "heuristics_train_set.txt", "validation": "heuristics_evaluation_set.txt"}


class HANS(MultipleChoiceTask):
    name = "hans"
    folder = "hans"
    eval_split = "validation"
    fewshot_splits = ("train",)
    expected = EXPECTED
    hub = ("jhu-cogsci/hans", None)
    hub_revision = "refs/convert/parquet"  # the main branch holds only a loading script, which datasets>=4 refuses
    hub_splits = {"train": "train", "validation": "validation"}

    def split_files(self, split):
        return [FILES[split]] if split in FILES else None

    def read_split(self, root: Path, split: str) -> list[dict]:
        path = root / FILES[split]
        rows = read_tsv(path, self.name, EXPECTED, ("gold_label", "sentence1", "sentence2", "heuristic", "subcase"))
        return [{"premise": r["sentence1"], "hypothesis": r["sentence2"], "heuristic": r["heuristic"],
                 "subcase": r["subcase"], "label": label_index(r["gold_label"], LABELS, self.name, f"{path}:{i}")}
                for i, r in enumerate(rows, 2)]

    def from_hub(self, row):
        return {"premise": row["premise"], "hypothesis": row["hypothesis"], "heuristic": row["heuristic"],
                "subcase": row["subcase"], "label": int(row["label"])}

    def doc_to_text(self, doc):
        return f"{doc['premise']}\nQuestion: {doc['hypothesis']} True or False?\nAnswer:"

    def doc_to_choices(self, doc):
        return ["True", "False"]

    def doc_to_gold(self, doc):
        return doc["label"]

    def score(self, doc, results: list[Loglikelihood]):
        metrics = super().score(doc, results)
        label = "entailed" if doc["label"] == 0 else "non_entailed"
        metrics[f"acc_{doc['heuristic']}"] = metrics["acc"]
        metrics[f"acc_{doc['heuristic']}_{label}"] = metrics["acc"]
        return metrics

    def groups(self, doc):
        return {"heuristic": doc["heuristic"], "subcase": doc["subcase"]}
