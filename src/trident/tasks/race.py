"""RACE-h: reading comprehension from high-school English exams, one example per article.

Files (the RACE release): race/{train,dev,test}/high/*.txt, each a JSON object {"article",
"questions": [...], "options": [[4 strings], ...], "answers": ["A".."D", ...]}.
As GPT-3 and lm-evaluation-harness: one document per article; the last question is scored, the
earlier ones appear in the prompt with their answers. Prompt (harness preprocess_race.doc_to_text):
"Article: {article}\n\n" + for each earlier question "Question: {q}\nAnswer: {answer}\n" (a
fill-in question ending in "  _  ." contributes its last five characters + the answer, exactly as
the harness does) + the last question -> " " + each of its four options.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from trident.tasks.base import MultipleChoiceTask, label_index
from trident.tasks.files import TEXT, Kind, TaskDataError, read_json, strings

EXPECTED = ('race/{train,dev,test}/high/*.txt, each a JSON object {"article", "questions", '
            '"options" (4 per question), "answers" ("A"-"D")} (RACE release)')
LETTERS = {"A": 0, "B": 1, "C": 2, "D": 3}
OPTIONS: Kind = (lambda v: isinstance(v, list) and all(strings(4)[0](o) for o in v),
                 "a list holding a list of 4 strings per question")
FIELDS = {"article": TEXT, "questions": strings(), "options": OPTIONS, "answers": strings()}


def _natural(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


class RACE(MultipleChoiceTask):
    name = "race"
    folder = "race"
    eval_split = "test"
    fewshot_splits = ("train", "validation")
    harness_excludes_scored_doc = False  # the harness config names a test split
    expected = EXPECTED
    hub = ("EleutherAI/race", "high")
    hub_splits = {"test": "test"}

    def split_files(self, split):
        name = {"train": "train", "validation": "dev", "test": "test"}.get(split)
        return [f"{name}/high"] if name else None

    def read_split(self, root: Path, split: str) -> list[dict]:
        folder = root / self.split_files(split)[0]
        files = sorted(folder.glob("*.txt"), key=_natural) if folder.is_dir() else []
        if not files:
            raise TaskDataError(f"{self.name}: no *.txt article files in {folder}; expected {EXPECTED}")
        docs = []
        for path in files:
            r = read_json(path, self.name, EXPECTED, FIELDS)
            if not (len(r["questions"]) == len(r["options"]) == len(r["answers"]) > 0):
                raise TaskDataError(f"{self.name}: {path}: questions, options and answers differ in length or are empty")
            problems = []
            for q, options, answer in zip(r["questions"], r["options"], r["answers"]):
                problems.append({"question": q, "options": options,
                                 "answer": label_index(answer, LETTERS, self.name, str(path))})
            docs.append({"article": r["article"], "problems": problems, "id": path.name})
        return docs

    def from_hub(self, row):
        problems = ast.literal_eval(row["problems"])  # the hub stores the list as its Python repr
        return {"article": row["article"], "id": row.get("example_id", ""),
                "problems": [{"question": p["question"], "options": p["options"], "answer": LETTERS[p["answer"]]}
                             for p in problems]}

    def doc_to_text(self, doc):
        text = "Article: " + doc["article"] + "\n\n"
        for problem in doc["problems"][:-1]:
            answer = problem["options"][problem["answer"]]
            if problem["question"][-6:] == "  _  .":
                text += problem["question"][-5:] + answer + "\n"
            else:
                text += "Question: " + problem["question"] + "\n" + "Answer: " + answer + "\n"
        return text + doc["problems"][-1]["question"]

    def doc_to_choices(self, doc):
        return list(doc["problems"][-1]["options"])

    def doc_to_gold(self, doc):
        return doc["problems"][-1]["answer"]
