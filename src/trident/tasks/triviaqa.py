"""TriviaQA (Joshi et al. 2017), closed book: the question alone, the answer generated.

Files: the reading-comprehension release's question files (triviaqa-rc.tar.gz, folder qa/), each one
JSON object {"Data": [{"Question", "QuestionId", "Answer": {"Aliases": [...], "Value", ...}}, ...]}.
The scored split is every qa/*-dev.json file (verified-web, verified-wikipedia, web, wikipedia:
18,669 questions), few-shot examples come from qa/*-train.json (web, wikipedia): exactly the
Hugging Face hub's `mandarjoshi/trivia_qa` config rc.nocontext, which lm-evaluation-harness's
`triviaqa` task scores. Prompt and metrics are that task's: "Question: {question}?\\nAnswer:",
greedy generation cut at a newline, "." or ",", whitespace stripped, exact match against any alias
ignoring case and punctuation; F1 is SQuAD's token F1 against the best alias (tasks/generation.py).
"""
from __future__ import annotations

from pathlib import Path

from trident.tasks.files import TEXT, TaskDataError, check_fields, read_json, strings
from trident.tasks.generation import GenerationTask

DEV_FILES = ("verified-web-dev.json", "verified-wikipedia-dev.json", "web-dev.json", "wikipedia-dev.json")
TRAIN_FILES = ("web-train.json", "wikipedia-train.json")
EXPECTED = ('triviaqa/qa/{' + ",".join(f[:-5] for f in DEV_FILES + TRAIN_FILES) + '}.json from '
            'triviaqa-rc.tar.gz: {"Data": [{"Question", "QuestionId", "Answer": {"Aliases": [...]}}]}')


class TriviaQA(GenerationTask):
    name = "triviaqa"
    folder = "triviaqa"
    eval_split = "validation"
    fewshot_splits = ("train",)
    expected = EXPECTED
    hub = ("mandarjoshi/trivia_qa", "rc.nocontext")
    hub_splits = {"train": "train", "validation": "validation"}
    until = ("\n", ".", ",")

    def split_files(self, split):
        files = {"validation": DEV_FILES, "train": TRAIN_FILES}.get(split)
        return [f"qa/{name}" for name in files] if files else None

    def read_split(self, root: Path, split: str) -> list[dict]:
        docs = []
        for name in self.split_files(split):
            path = root / name
            data = read_json(path, self.name, EXPECTED, {"Data": (lambda v: isinstance(v, list), "a list")})["Data"]
            for i, record in enumerate(data):
                where = f"{path}: Data[{i}]"
                if not isinstance(record, dict):
                    raise TaskDataError(f"{self.name}: {where}: expected a JSON object; expected {EXPECTED}")
                check_fields(record, {"Question": TEXT, "QuestionId": TEXT,
                                      "Answer": (lambda v: isinstance(v, dict), "an object")}, self.name, where, EXPECTED)
                answer = check_fields(record["Answer"], {"Aliases": strings()}, self.name, f"{where}.Answer", EXPECTED)
                if not answer["Aliases"]:
                    raise TaskDataError(f"{self.name}: {where}.Answer: 'Aliases' is empty; expected {EXPECTED}")
                docs.append({"id": record["QuestionId"], "question": record["Question"], "aliases": answer["Aliases"]})
        return docs

    def from_hub(self, row):
        return {"id": row["question_id"], "question": row["question"], "aliases": list(row["answer"]["aliases"])}

    def doc_to_text(self, doc):
        return f"Question: {doc['question']}?\nAnswer:"

    def doc_to_targets(self, doc):
        return doc["aliases"]
