"""Local copies of the Hugging Face dataset repositories trident's tasks load, built from the published
fixture files of tests/fixtures/eval the way the hub's copies were built: the hub's repository names,
configs, split names, column names and column types (ClassLabel labels, string labels, RACE's
`problems` stored as a Python repr). Each repository is written as the hub lays out a script-free
dataset: parquet files plus a README.md whose YAML `configs` maps config and split names to files."""
from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from datasets import ClassLabel, Dataset, Features, Sequence, Value

from eval_fixtures import FIXTURES

S, I = Value("string"), Value("int32")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tsv(path: Path) -> list[dict]:
    header, *lines = path.read_text().splitlines()
    return [dict(zip(header.split("\t"), line.split("\t"))) for line in lines if line.strip()]


def lambada() -> dict:
    return {"test": [{"text": r["text"]} for r in _jsonl(FIXTURES / "lambada/lambada_test.jsonl")]}


def piqa() -> dict:
    out = {}
    for split, stem in (("train", "train"), ("validation", "valid")):
        labels = [int(x) for x in (FIXTURES / f"piqa/{stem}-labels.lst").read_text().split()]
        out[split] = [{"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"], "label": y}
                      for r, y in zip(_jsonl(FIXTURES / f"piqa/{stem}.jsonl"), labels)]
    return out


HELLASWAG_COLUMNS = ("ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "source_id", "split", "split_type")


def hellaswag() -> dict:  # the hub stores the label as a string ("0".."3")
    return {split: [{k: r[k] for k in HELLASWAG_COLUMNS} | {"label": str(r["label"])}
                    for r in _jsonl(FIXTURES / f"hellaswag/hellaswag_{name}.jsonl")]
            for split, name in (("train", "train"), ("validation", "val"))}


def winogrande() -> dict:  # answer stays the string "1" or "2", as on the hub
    return {split: [{k: r[k] for k in ("sentence", "option1", "option2", "answer")}
                    for r in _jsonl(FIXTURES / f"winogrande/{name}.jsonl")]
            for split, name in (("train", "train_xl"), ("validation", "dev"))}


SUPERGLUE_COLUMNS = {"boolq": ("question", "passage", "idx"), "rte": ("premise", "hypothesis", "idx"),
                     "wic": ("word", "sentence1", "sentence2", "start1", "start2", "end1", "end2", "idx")}
SUPERGLUE_LABELS = {"boolq": [False, True], "rte": ["entailment", "not_entailment"], "wic": [False, True]}


def superglue(config: str) -> dict:
    folder = {"boolq": "BoolQ", "rte": "RTE", "wic": "WiC"}[config]
    return {split: [{k: r[k] for k in SUPERGLUE_COLUMNS[config]} | {"label": SUPERGLUE_LABELS[config].index(r["label"])}
                    for r in _jsonl(FIXTURES / f"{folder}/{name}.jsonl")]
            for split, name in (("train", "train"), ("validation", "val"))}


def anli() -> dict:
    out = {}
    for round in (1, 2, 3):
        for split, name in (("train", "train"), ("dev", "dev"), ("test", "test")):
            out[f"{split}_r{round}"] = [{"uid": r["uid"], "premise": r["context"], "hypothesis": r["hypothesis"],
                                         "label": "enc".index(r["label"]), "reason": r["reason"]}
                                        for r in _jsonl(FIXTURES / f"anli/R{round}/{name}.jsonl")]
    return out


HANS_LABELS = ["entailment", "non-entailment"]
HANS_TEXT_COLUMNS = ("parse_premise", "parse_hypothesis", "binary_parse_premise", "binary_parse_hypothesis",
                     "heuristic", "subcase", "template")
ANLI_LABELS = ["entailment", "neutral", "contradiction"]


def hans() -> dict:
    renamed = {"premise": "sentence1", "hypothesis": "sentence2", "parse_premise": "sentence1_parse",
               "parse_hypothesis": "sentence2_parse", "binary_parse_premise": "sentence1_binary_parse",
               "binary_parse_hypothesis": "sentence2_binary_parse", "heuristic": "heuristic",
               "subcase": "subcase", "template": "template"}
    return {split: [{k: r[v] for k, v in renamed.items()} | {"label": HANS_LABELS.index(r["gold_label"])}
                    for r in _tsv(FIXTURES / f"hans/heuristics_{name}_set.txt")]
            for split, name in (("train", "train"), ("validation", "evaluation"))}


def race() -> dict:  # one row per article; `problems` is the repr of a list of dicts, as on the hub
    rows = []
    for path in sorted((FIXTURES / "race/test/high").glob("*.txt")):
        r = json.loads(path.read_text())
        problems = [{"answer": a, "options": o, "question": q}
                    for q, o, a in zip(r["questions"], r["options"], r["answers"])]
        rows.append({"article": r["article"], "problems": repr(problems)})
    return {"test": rows}


TRIVIAQA_ANSWER = {"aliases": Sequence(S), "normalized_aliases": Sequence(S), "matched_wiki_entity_name": S,
                   "normalized_matched_wiki_entity_name": S, "normalized_value": S, "type": S, "value": S}


def triviaqa() -> dict:  # rc.nocontext: the qa/*-{dev,train}.json files in sorted order, answers as a struct
    out = {}
    for split, pattern in (("validation", "*-dev.json"), ("train", "*-train.json")):
        out[split] = [{"question": r["Question"], "question_id": r["QuestionId"], "question_source": r["QuestionSource"],
                       "answer": {"aliases": r["Answer"]["Aliases"], "normalized_aliases": r["Answer"]["NormalizedAliases"],
                                  "matched_wiki_entity_name": r["Answer"]["MatchedWikiEntityName"],
                                  "normalized_matched_wiki_entity_name": r["Answer"]["NormalizedMatchedWikiEntityName"],
                                  "normalized_value": r["Answer"]["NormalizedValue"], "type": r["Answer"]["Type"],
                                  "value": r["Answer"]["Value"]}}
                      for path in sorted((FIXTURES / "triviaqa/qa").glob(pattern))
                      for r in json.loads(path.read_text())["Data"]]
    return out


def features(*labels_and_columns) -> Features:
    return Features(dict(labels_and_columns))


# hub repository -> config -> (splits -> rows, column types)
REPOS = {
    "EleutherAI/lambada_openai": {"default": (lambada, features(("text", S)))},
    "baber/piqa": {"default": (piqa, features(("goal", S), ("sol1", S), ("sol2", S),
                                              ("label", ClassLabel(names=["0", "1"]))))},
    "Rowan/hellaswag": {"default": (hellaswag, features(("ind", I), ("activity_label", S), ("ctx_a", S), ("ctx_b", S),
                                                        ("ctx", S), ("endings", Sequence(S)), ("source_id", S),
                                                        ("split", S), ("split_type", S), ("label", S)))},
    "allenai/winogrande": {"winogrande_xl": (winogrande, features(("sentence", S), ("option1", S), ("option2", S),
                                                                  ("answer", S)))},
    "aps/super_glue": {
        "boolq": (lambda: superglue("boolq"), features(("question", S), ("passage", S), ("idx", I),
                                                       ("label", ClassLabel(names=["False", "True"])))),
        "rte": (lambda: superglue("rte"), features(("premise", S), ("hypothesis", S), ("idx", I),
                                                   ("label", ClassLabel(names=SUPERGLUE_LABELS["rte"])))),
        "wic": (lambda: superglue("wic"), features(("word", S), ("sentence1", S), ("sentence2", S), ("start1", I),
                                                   ("start2", I), ("end1", I), ("end2", I), ("idx", I),
                                                   ("label", ClassLabel(names=["False", "True"])))),
    },
    "facebook/anli": {"plain_text": (anli, features(("uid", S), ("premise", S), ("hypothesis", S),
                                                    ("label", ClassLabel(names=ANLI_LABELS)),
                                                    ("reason", S)))},
    "jhu-cogsci/hans": {"plain_text": (hans, features(("premise", S), ("hypothesis", S),
                                                      ("label", ClassLabel(names=HANS_LABELS)),
                                                      *[(k, S) for k in HANS_TEXT_COLUMNS]))},
    "EleutherAI/race": {"high": (race, features(("article", S), ("problems", S)))},
    "mandarjoshi/trivia_qa": {"rc.nocontext": (triviaqa, features(("question", S), ("question_id", S),
                                                                   ("question_source", S), ("answer", TRIVIAQA_ANSWER)))},
}


CONVERTED = {"jhu-cogsci/hans"}  # read at refs/convert/parquet: <config>/<split>/0000.parquet, no card


def write_hub_copies(root: Path) -> Path:
    """root/<owner>/<name>/ for every repository of REPOS, laid out as on the hub: parquet files under
    <config>/ and a README.md whose `configs` maps splits to them, or the parquet-conversion branch's
    <config>/<split>/0000.parquet (no card) for the repositories of CONVERTED."""
    for repo, configs in REPOS.items():
        folder = root / repo
        card = ["---", "configs:"]
        for i, (config, (rows_of, types)) in enumerate(configs.items()):
            card += [f"- config_name: {config}"] + (["  default: true"] if i == 0 else []) + ["  data_files:"]
            for split, rows in rows_of().items():
                converted = repo in CONVERTED
                file = f"{config}/{split}/0000.parquet" if converted else f"{config}/{split}-00000-of-00001.parquet"
                (folder / file).parent.mkdir(parents=True, exist_ok=True)
                Dataset.from_list(rows, features=types).to_parquet(str(folder / file))
                card += [f"  - split: {split}", f"    path: {file}"]
        if repo not in CONVERTED:
            (folder / "README.md").write_text("\n".join(card + ["---", ""]))
    return root


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory):
    return write_hub_copies(tmp_path_factory.mktemp("hub"))


@pytest.fixture
def offline_hub(hub_root, tmp_path, monkeypatch):
    """TRIDENT_HUB_DIR at the local copies; datasets offline, caching under tmp_path."""
    from trident.tasks.hub import HUB_DIR_ENV

    monkeypatch.setenv(HUB_DIR_ENV, str(hub_root))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    return hub_root
