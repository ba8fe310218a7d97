"""Generation tasks (TriviaQA, LAMBADA as generation): exact match and F1 equal lm-evaluation-harness's
on the same examples at 0 and 1 shot (its own triviaqa config, the data read from local files), and a
tp2 evaluation generates the same answers as one process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from distributed import run_distributed
from eval_fixtures import harness_results, harness_sentences, write_triviaqa

SHOTS = [0, 1]
PROMPTS = ["Return the", "def read(path):", "The value of the", "", "Question: What is the path?\nAnswer:"]
TASKS = ["triviaqa", "lambada_gen"]
LAMBADA_GEN = """task: {name}
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: generate_until
doc_to_text: "{{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{text.split(' ')[-1]}}}}"
target_delimiter: " "
generation_kwargs: {{until: ["\\n"], max_gen_toks: 16, do_sample: false, temperature: 0.0}}
filter_list:
  - name: first_word
    filter:
      - function: regex
        regex_pattern: "(\\\\S+)"
      - function: take_first
{scoring}"""
EXACT = """metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: {ignore_case}
    ignore_punctuation: true
"""
F1 = """process_results: !function utils.{function}
metric_list:
  - metric: f1
    aggregation: mean
    higher_is_better: true
"""
# F1 by the harness's own SQuAD F1 (its ReCoRD task's aggregation: references are "<group>_<answer>")
UTILS = """from lm_eval.tasks.super_glue.record.t5_utils import squad_f1_agg


def trivia_f1(doc, results):
    return {"f1": squad_f1_agg([(results[0], "q_" + alias) for alias in doc["answer"]["aliases"]])}


def lambada_f1(doc, results):
    return {"f1": squad_f1_agg([(results[0], "q_" + doc["text"].split(" ")[-1])])}
"""


def _harness_tasks(root: Path, trivia_rows: dict, lambada_file: Path) -> Path:
    """The harness's triviaqa config, only its dataset pointed at local files, plus an F1 twin and the
    LAMBADA generation task, in root/tasks."""
    import lm_eval

    tasks = root / "tasks"
    tasks.mkdir()
    files = {}
    for split, rows in trivia_rows.items():
        files[split] = str(root / f"trivia_{split}.jsonl")
        Path(files[split]).write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks/triviaqa/default.yaml").read_text())
    config |= {"task": "tiny_triviaqa", "dataset_path": "json", "dataset_kwargs": {"data_files": files}}
    config.pop("dataset_name")
    (tasks / "tiny_triviaqa.yaml").write_text(yaml.safe_dump(config))
    twin = {k: v for k, v in config.items() if k != "metric_list"} | {"task": "tiny_triviaqa_f1"}
    (tasks / "tiny_triviaqa_f1.yaml").write_text(yaml.safe_dump(twin) + F1.format(function="trivia_f1"))
    (tasks / "tiny_lambada_gen.yaml").write_text(LAMBADA_GEN.format(
        name="tiny_lambada_gen", data=lambada_file, scoring=EXACT.format(ignore_case="false")))
    (tasks / "tiny_lambada_gen_f1.yaml").write_text(LAMBADA_GEN.format(
        name="tiny_lambada_gen_f1", data=lambada_file, scoring=F1.format(function="lambada_f1")))
    (tasks / "utils.py").write_text(UTILS)
    return tasks


@pytest.fixture(scope="module")
def data(trained_checkpoint, tmp_path_factory):
    """Questions and passages whose answers are, for some of them, what the model itself writes (so exact
    match and F1 take every value: a match up to case and punctuation, a partial overlap, a miss)."""
    from trident.evaluate.lm import load_trident
    from trident.tasks import get_task

    path, _, text = trained_checkpoint
    root = tmp_path_factory.mktemp("gen")
    lm = load_trident(path, batch_size=4)
    sentences = harness_sentences(text, 12)
    questions = [" ".join(s.split()[:5]) for s in sentences]
    trivia = get_task("triviaqa")
    prompts = [trivia.doc_to_text({"question": q}) for q in questions]
    # "_" separates the harness's F1 groups: kept out of the answers
    said = [a.strip().replace("_", "-") for a in lm.generate_until(prompts, trivia.until, trivia.max_new_tokens)]
    aliases = [[said[i].upper() + "!"] if i % 3 == 0 else [said[i].split(" ")[0] + " zebra", "zebra"] if i % 3 == 1
               else ["zebra"] for i in range(len(questions))]
    rows = write_triviaqa(root / "data", list(zip(questions[:8], aliases[:8])), list(zip(questions[8:], aliases[8:])))
    sentences = [s.replace("_", "-") for s in sentences]
    prefixes = [s.rsplit(" ", 1)[0] for s in sentences]
    words = [w.split()[0].replace("_", "-") if w.split() else "none"
             for w in lm.generate_until(prefixes, ("\n",), 16)]
    lambada = root / "data" / "lambada" / "lambada_test.jsonl"
    lambada.parent.mkdir()
    lambada.write_text("".join(json.dumps({"text": f"{p} {words[i] if i % 2 == 0 else s.rsplit(' ', 1)[1]}"}) + "\n"
                               for i, (p, s) in enumerate(zip(prefixes, sentences))))
    return path, root, _harness_tasks(root, rows, lambada)


def test_exact_match_and_f1_equal_the_harness(data):
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_trident

    path, root, tasks = data
    ours = run_evaluation(load_trident(path, batch_size=4), TASKS, SHOTS, root / "data", None, progress=False)
    names = ["tiny_triviaqa", "tiny_triviaqa_f1", "tiny_lambada_gen", "tiny_lambada_gen_f1"]
    theirs = {str(k): harness_results(tasks, names, [("trident", f"checkpoint={path}")], k)[0] for k in SHOTS}
    seen = set()
    for k in SHOTS:
        harness = theirs[str(k)]
        for task, (name, flt) in {"triviaqa": ("tiny_triviaqa", "remove_whitespace"),
                                  "lambada_gen": ("tiny_lambada_gen", "first_word")}.items():
            metrics = ours["results"][task][str(k)]["metrics"]
            assert metrics["exact_match"] == pytest.approx(harness[name][f"exact_match,{flt}"], abs=1e-12), (task, k)
            assert metrics["f1"] == pytest.approx(harness[f"{name}_f1"][f"f1,{flt}"], abs=1e-12), (task, k)
            seen |= {metrics["exact_match"], metrics["f1"]}
    assert any(0 < v < 1 for v in seen) and ours["results"]["triviaqa"]["0"]["n"] == 8  # scores that can differ


def _parallel(rank, world, path, data_dir):
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.parallel_lm import load_parallel

    lm = load_parallel(path, ["parallel.tp=2"], batch_size=4)
    texts = lm.generate_until(PROMPTS, ("\n", "."), 64) + lm.generate(PROMPTS, 6, temperature=1.0, top_p=0.9, seed=5)
    return run_evaluation(lm, TASKS, SHOTS, data_dir, None, limit=4, progress=False)["results"], texts


def test_tp2_generates_what_one_process_generates(data):
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_trident

    path, root, _ = data
    single = run_evaluation(load_trident(path, batch_size=4), TASKS, SHOTS, root / "data", None, limit=4,
                            progress=False)["results"]
    parallel, texts = run_distributed(_parallel, 2, path, root / "data", timeout=240)[0]
    one = load_trident(path, batch_size=4)  # KV-cached greedy decoding in one process; sampling with top-p, same draws
    assert texts == one.generate_until(PROMPTS, ("\n", "."), 64) + one.generate(PROMPTS, 6, temperature=1.0,
                                                                               top_p=0.9, seed=5)
    assert any(texts) and len(set(texts)) > 1
    for task in TASKS:
        for k in map(str, SHOTS):
            assert parallel[task][k]["metrics"] == single[task][k]["metrics"], (task, k)
            assert parallel[task][k]["generation"]["until"] == single[task][k]["generation"]["until"]


def test_fewshot_spread_counts_exact_match_flips(data):
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_trident

    path, root, _ = data
    entry = run_evaluation(load_trident(path, batch_size=4), ["triviaqa"], [1], root / "data", None, limit=4,
                           fewshot_seeds=2, progress=False)["results"]["triviaqa"]["1"]
    spread = entry["fewshot_spread"]["metrics"]
    assert 0.0 <= spread["exact_match"]["flipped"] <= 1.0 and "flipped" not in spread["f1"]
    assert spread["exact_match"]["per_seed"][0] == entry["metrics"]["exact_match"]
