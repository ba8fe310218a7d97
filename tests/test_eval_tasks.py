"""Each task reads its published file format and builds the lm-evaluation-harness prompt (hand-checked)."""
from __future__ import annotations

import json
import shutil

import pytest

from eval_fixtures import FIXTURES
from trident.evaluate import fewshot
from trident.tasks import TaskDataError, expand, get_task


def requests_of(name, index=0, split=None):
    task = get_task(name)
    docs = task.load(FIXTURES, split or task.eval_split)
    return task, docs, task.requests(docs[index], "")


def test_lambada_context_is_text_minus_last_word():
    task, docs, reqs = requests_of("lambada")
    assert len(docs) == 4
    assert reqs == [("She poured the tea and handed him the cup. He thanked her and drank the", " tea")]


def test_lambada_cloze_is_gpt3s_fill_in_the_blank_format():
    task, docs, reqs = requests_of("lambada_cloze")
    assert reqs == [("She poured the tea and handed him the cup. He thanked her and drank the ____. ->", " tea")]
    assert task.fewshot_example(docs[1]) == ("The dog barked at the mailman every morning. The mailman was afraid "
                                             "of the ____. -> dog")


def test_piqa_prompt_and_labels_file():
    task, docs, reqs = requests_of("piqa", 1)
    assert reqs == [("Question: Clean a window\nAnswer:", " rub it with mud."),
                    ("Question: Clean a window\nAnswer:", " wipe it with soapy water.")]
    assert [task.doc_to_gold(d) for d in docs] == [0, 1, 0]


def test_hellaswag_preprocessing():
    task, docs, reqs = requests_of("hellaswag", 1)
    # " [title]" -> ". ", other [..] dropped, ctx_b capitalised, double spaces collapsed
    context = "Personal Care and Style: How to brush your teeth. Wet the brush. You"
    # "[substeps] Eat  the brush." keeps the space left by the dropped tag, exactly as the harness does
    assert reqs[0] == (context, "  Eat the brush.")
    assert reqs[1] == (context, " put paste on it.")
    assert task.doc_to_gold(docs[1]) == 1 and task.primary_metric == "acc_norm"
    _, _, first = requests_of("hellaswag", 0)
    assert first[3][0].startswith("Removing ice from car: Then, the man writes over the snow")
    assert first[3][0].endswith("smiles. Then")


def test_winogrande_partial_scoring():
    task, docs, reqs = requests_of("winogrande")
    assert reqs == [("Sarah was a much better surgeon than Maria so Sarah", " always got the harder cases."),
                    ("Sarah was a much better surgeon than Maria so Maria", " always got the harder cases.")]
    train = task.load(FIXTURES, "train")
    assert task.fewshot_example(train[0]) == "The trophy did not fit in the suitcase because the trophy was too big."


def test_superglue_prompts():
    _, docs, reqs = requests_of("boolq")
    assert reqs == [("Water makes things wet.\nQuestion: is water wet?\nAnswer:", " no"),
                    ("Water makes things wet.\nQuestion: is water wet?\nAnswer:", " yes")]
    assert [d["label"] for d in docs] == [1, 0]
    _, docs, reqs = requests_of("rte", 1)
    assert reqs[0] == ("It rained all day.\nQuestion: The day was dry. True or False?\nAnswer:", " True")
    assert docs[1]["label"] == 1  # not_entailment -> "False"
    _, docs, reqs = requests_of("wic", 1)
    assert reqs[1] == ("Sentence 1: Do you want to come over to my place later?\nSentence 2: This is a nice place "
                       "to live.\nQuestion: Is the word 'place' used in the same way in the two sentences above?"
                       "\nAnswer:", " yes")


def test_anli_rounds_and_labels():
    assert expand(["anli"]) == ["anli_r1", "anli_r2", "anli_r3"]
    task, docs, reqs = requests_of("anli_r2", 1)
    assert reqs == [("Tom has two brothers.\nQuestion: Tom is an only child. True, False, or Neither?\nAnswer:", f" {c}")
                    for c in ("True", "Neither", "False")]
    assert [d["label"] for d in docs] == [0, 2, 1]  # e, c, n
    assert task.eval_split == "test"


def test_hans_prompt_and_heuristic_metrics():
    task, docs, reqs = requests_of("hans")
    assert reqs[0] == ("The doctor paid the actor .\nQuestion: The actor paid the doctor . True or False?\nAnswer:", " True")
    assert [d["heuristic"] for d in docs] == ["lexical_overlap", "lexical_overlap", "subsequence", "constituent"]
    assert docs[0]["label"] == 1 and docs[1]["label"] == 0


def test_race_one_document_per_article_scoring_the_last_question():
    task, docs, reqs = requests_of("race")
    assert [d["id"] for d in docs] == ["high1.txt", "high2.txt"]
    # the earlier fill-in question contributes its last 5 characters + answer (as the harness does)
    assert reqs[0][0] == "Article: Tom likes apples. He eats one every day.\n\nQuestion: What does Tom like?\nAnswer: apples\nTom eats an apple every  _  ."
    assert [c for _, c in reqs] == [" week", " month", " day", " year"]
    assert task.doc_to_gold(docs[0]) == 2
    train = task.load(FIXTURES, "train")
    assert [d["id"] for d in train] == ["high2.txt", "high10.txt"]  # natural order


def test_race_earlier_questions_are_answered_in_the_prompt():
    task = get_task("race")
    doc = {"article": "A.", "problems": [
        {"question": "Q1?", "options": ["a", "b", "c", "d"], "answer": 3},
        {"question": "The author thinks  _  .", "options": ["w", "x", "y", "z"], "answer": 0},
        {"question": "Q3?", "options": ["e", "f", "g", "h"], "answer": 1}]}
    assert task.doc_to_text(doc) == "Article: A.\n\nQuestion: Q1?\nAnswer: d\n _  .w\nQ3?"


def test_fewshot_draws_never_include_the_scored_example_and_are_reproducible():
    task = get_task("lambada")
    docs = task.load(FIXTURES, "test")
    pool = fewshot.load_pool(task, FIXTURES, docs)
    assert pool.is_eval_split and pool.split == "test"
    for i in range(len(docs)):
        drawn = fewshot.draw(pool, 3, 1234, "lambada", i)
        assert len(drawn) == 3 and i not in drawn and len(set(drawn)) == 3
        assert drawn == fewshot.draw(pool, 3, 1234, "lambada", i)
    assert any(fewshot.draw(pool, 2, 1, "lambada", i) != fewshot.draw(pool, 2, 2, "lambada", i) for i in range(4))
    with pytest.raises(TaskDataError, match="4-shot needs 4 examples but the test split offers only 3"):
        fewshot.draw(pool, 4, 1234, "lambada", 0)


def test_fewshot_prefix_uses_train_split_and_delimiters():
    task = get_task("piqa")
    pool = fewshot.load_pool(task, FIXTURES, task.load(FIXTURES, "validation"))
    assert pool.split == "train" and not pool.is_eval_split
    text = fewshot.prefix(task, pool, [2, 0])
    assert text == ("Question: Keep bread fresh\nAnswer: store it in a sealed bag.\n\n"
                    "Question: To dry wet shoes,\nAnswer: stuff them with newspaper.\n\n")


@pytest.mark.parametrize("name, relative", [
    ("lambada", "lambada/lambada_test.jsonl"), ("piqa", "piqa/valid-labels.lst"),
    ("hellaswag", "hellaswag/hellaswag_val.jsonl"), ("winogrande", "winogrande/dev.jsonl"),
    ("boolq", "BoolQ/val.jsonl"), ("anli_r3", "anli/R3/test.jsonl"),
    ("hans", "hans/heuristics_evaluation_set.txt"), ("race", "race/test/high"),
])
def test_missing_file_names_task_file_and_format(tmp_path, name, relative):
    shutil.copytree(FIXTURES, tmp_path / "data")
    target = tmp_path / "data" / relative
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    task = get_task(name)
    with pytest.raises(TaskDataError) as err:
        task.load(tmp_path / "data", task.eval_split)
    message = str(err.value)
    assert message.startswith(f"{name}:") and target.name in message and "expected" in message


def test_malformed_records_are_reported_with_their_position(tmp_path):
    bad = tmp_path / "piqa"
    shutil.copytree(FIXTURES / "piqa", bad)
    (bad / "valid.jsonl").write_text('{"goal": "a", "sol1": "b", "sol2": "c"}\n{not json}\n')
    with pytest.raises(TaskDataError, match=r"piqa: .*valid.jsonl:2: not valid JSON"):
        get_task("piqa").load(tmp_path, "validation")
    (bad / "valid.jsonl").write_text('{"goal": "a", "sol1": "b", "sol2": "c"}\n{"goal": "a", "sol1": "b"}\n')
    with pytest.raises(TaskDataError, match=r"valid.jsonl:2: missing key\(s\) \['sol2'\]"):
        get_task("piqa").load(tmp_path, "validation")
    (bad / "valid.jsonl").write_text('{"goal": "a", "sol1": "b", "sol2": "c"}\n')
    with pytest.raises(TaskDataError, match="3 labels for 1 examples"):
        get_task("piqa").load(tmp_path, "validation")


def test_unknown_labels_and_bad_columns_are_rejected(tmp_path):
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "val.jsonl").write_text(json.dumps({"premise": "a", "hypothesis": "b", "label": "maybe"}) + "\n")
    with pytest.raises(TaskDataError, match=r"rte: .*val.jsonl:1: unknown label 'maybe'"):
        get_task("rte").load(tmp_path, "validation")
    (tmp_path / "hans").mkdir()
    (tmp_path / "hans" / "heuristics_evaluation_set.txt").write_text("gold_label\tsentence1\nentailment\ta\n")
    with pytest.raises(TaskDataError, match=r"hans: .*lacks column\(s\) \['sentence2', 'heuristic', 'subcase'\]"):
        get_task("hans").load(tmp_path, "validation")
    with pytest.raises(KeyError, match="unknown task 'squad'"):
        expand(["squad"])
