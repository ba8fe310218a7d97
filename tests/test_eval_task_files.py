"""Every task reader checks the type of each field it uses and names FILE:LINE and the field
(TaskDataError, never AttributeError); undecodable bytes in any task file name FILE:LINE too."""
from __future__ import annotations

import json
import shutil

import pytest

from eval_fixtures import FIXTURES
from trident.tasks import TaskDataError, get_task

GOOD = {
    "hellaswag": {"activity_label": "A", "ctx_a": "b", "ctx_b": "c", "endings": ["w", "x", "y", "z"], "label": 1},
    "piqa": {"goal": "g", "sol1": "a", "sol2": "b"},
    "winogrande": {"sentence": "A _ b.", "option1": "x", "option2": "y", "answer": "1"},
    "boolq": {"question": "q", "passage": "p", "label": True},
    "rte": {"premise": "p", "hypothesis": "h", "label": "entailment"},
    "wic": {"sentence1": "I run.", "sentence2": "We run.", "start1": 2, "end1": 5, "label": False},
    "anli_r1": {"context": "c", "hypothesis": "h", "label": "e"},
    "lambada": {"text": "the last word"},
}
FILES = {"hellaswag": "hellaswag/hellaswag_val.jsonl", "piqa": "piqa/valid.jsonl", "winogrande": "winogrande/dev.jsonl",
         "boolq": "BoolQ/val.jsonl", "rte": "RTE/val.jsonl", "wic": "WiC/val.jsonl", "anli_r1": "anli/R1/test.jsonl",
         "lambada": "lambada/lambada_test.jsonl"}
BAD = [
    ("hellaswag", "endings", [1, 2, 3, 4]), ("hellaswag", "endings", ["a", "b"]), ("hellaswag", "ctx_b", None),
    ("hellaswag", "activity_label", 7), ("hellaswag", "label", [1]),
    ("piqa", "sol1", None), ("piqa", "goal", ["g"]), ("piqa", "sol2", 3),
    ("winogrande", "sentence", 5), ("winogrande", "option1", None), ("winogrande", "answer", {"a": 1}),
    ("boolq", "passage", None), ("boolq", "question", 1), ("rte", "premise", ["p"]),
    ("wic", "start1", "2"), ("wic", "end1", 5.5), ("wic", "sentence1", None),
    ("anli_r1", "context", None), ("anli_r1", "label", ["e"]), ("lambada", "text", 12),
]


def load(tmp_path, name):
    task = get_task(name)
    return task.load(tmp_path / "data", task.eval_split)


@pytest.mark.parametrize("name,key,value", BAD)
def test_wrong_field_type_names_file_line_and_field(tmp_path, name, key, value):
    shutil.copytree(FIXTURES, tmp_path / "data")
    path = tmp_path / "data" / FILES[name]
    bad = dict(GOOD[name], **{key: value})
    path.write_text(json.dumps(GOOD[name]) + "\n\n" + json.dumps(bad) + "\n")  # the bad record is on line 3
    if name == "piqa":
        (tmp_path / "data" / "piqa" / "valid-labels.lst").write_text("0\n1\n")
    with pytest.raises(TaskDataError) as err:
        load(tmp_path, name)
    message = str(err.value)
    assert message.startswith(f"{name}: ") and f"{path}:3" in message and f"'{key}'" in message, message


def test_good_records_still_load(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "data")
    for name, record in GOOD.items():
        (tmp_path / "data" / FILES[name]).write_text(json.dumps(record) + "\n")
    (tmp_path / "data" / "piqa" / "valid-labels.lst").write_text("1\n")
    for name in GOOD:
        assert len(load(tmp_path, name)) == 1


@pytest.mark.parametrize("key,value", [("questions", "What?"), ("options", [[1, 2, 3, 4]]),
                                       ("options", ["abcd"]), ("answers", [1]), ("article", None)])
def test_race_field_types_name_the_file_and_field(tmp_path, key, value):
    shutil.copytree(FIXTURES, tmp_path / "data")
    path = tmp_path / "data" / "race" / "test" / "high" / "high2.txt"
    record = json.loads(path.read_text())
    record[key] = value
    path.write_text(json.dumps(record))
    with pytest.raises(TaskDataError) as err:
        load(tmp_path, "race")
    assert str(err.value).startswith("race: ") and str(path) in str(err.value) and f"'{key}'" in str(err.value)


@pytest.mark.parametrize("name,relative,content,line", [
    ("piqa", "piqa/valid-labels.lst", b"0\n1\n\xff\n", 3),
    ("hans", "hans/heuristics_evaluation_set.txt", None, 2),
    ("race", "race/test/high/high2.txt", b'{"article": "caf\xe9"}', 1),
])
def test_invalid_utf8_in_non_jsonl_task_files_names_file_and_line(tmp_path, name, relative, content, line):
    shutil.copytree(FIXTURES, tmp_path / "data")
    path = tmp_path / "data" / relative
    if content is None:  # corrupt the first data row of the TSV
        header, first, rest = path.read_bytes().split(b"\n", 2)
        content = header + b"\n" + first + b"\xff\n" + rest
    path.write_bytes(content)
    with pytest.raises(TaskDataError, match=rf"{name}: {path}:{line}: not UTF-8"):
        load(tmp_path, name)


def test_a_missing_checkpoint_is_named_before_any_task_file(tmp_path, capsys):
    from trident.cli import main

    task_args = ["--tasks", "lambada,piqa", "--data-dir", str(tmp_path / "no-task-data")]
    assert main(["eval", str(tmp_path / "runs" / "nope"), *task_args]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'runs' / 'nope'}: no such checkpoint" in err and "no-task-data" not in err
    (tmp_path / "empty" / "checkpoints" / "step_0000001").mkdir(parents=True)  # a save that never completed
    assert main(["eval", str(tmp_path / "empty"), *task_args]) == 2
    err = capsys.readouterr().err
    assert "empty: holds no complete checkpoint" in err and "no-task-data" not in err
    assert main(["eval", "--hf", str(tmp_path / "nope-hf"), *task_args]) == 2
    assert "--hf" in capsys.readouterr().err
