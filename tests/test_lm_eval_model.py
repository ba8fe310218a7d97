"""lm-evaluation-harness scores a trident checkpoint through `--model trident` exactly as it scores
the same checkpoint exported to Hugging Face (`--model hf`): a multiple-choice task, LAMBADA (acc
and perplexity) and a rolling-loglikelihood task, all read from local files (no hub, no network)."""
import json
import os
import subprocess
import sys

import pytest

from eval_fixtures import (HARNESS_MC_TASK, HARNESS_OFFLINE_ENV, harness_lambada_task, harness_sentences,
                           write_harness_mc_data)


TASKS = {
    "tiny_lambada": harness_lambada_task("tiny_lambada", "{data}/lambada.jsonl"),
    "tiny_rolling": """task: tiny_rolling
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}/lambada.jsonl}}}}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
""",
}
NAMES = ("tiny_mc", *TASKS)  # the multiple-choice task is eval_fixtures.HARNESS_MC_TASK


def _write_tasks(root, text):
    data = root / "data"
    data.mkdir()
    with open(data / "lambada.jsonl", "w") as f:
        for s in harness_sentences(text):
            f.write(json.dumps({"text": s}) + "\n")
    mc = write_harness_mc_data(data / "mc.jsonl", text)
    tasks = root / "tasks"
    tasks.mkdir()
    for name, body in TASKS.items():
        (tasks / f"{name}.yaml").write_text(body.format(data=data))
    metrics = "  - metric: acc\n  - metric: acc_norm\n"
    (tasks / "tiny_mc.yaml").write_text(HARNESS_MC_TASK.format(data=mc, metrics=metrics))
    return tasks


def _harness(models: list[tuple[str, str]], tasks) -> list[dict]:
    """lm_eval in one fresh process (one import of the harness), offline: per model, its results per task."""
    code = ("import json, sys, lm_eval; import trident.evaluate.lm_eval_model; "
            "from lm_eval.tasks import TaskManager; "
            "manager = TaskManager(include_path=sys.argv[1], include_defaults=False); "
            "models = [sys.argv[i:i + 2] for i in range(3, len(sys.argv), 2)]; "
            "print('RESULTS ' + json.dumps([lm_eval.simple_evaluate(model=m, model_args=a, "
            "tasks=sys.argv[2].split(','), task_manager=manager, batch_size=4, device='cpu')['results'] "
            "for m, a in models]))")
    env = dict(os.environ, **HARNESS_OFFLINE_ENV)
    done = subprocess.run([sys.executable, "-c", code, str(tasks), ",".join(NAMES),
                           *[part for model in models for part in model]],
                          capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


@pytest.mark.timeout(600)
def test_harness_scores_trident_like_its_hugging_face_export(trained_checkpoint, tmp_path):  # noqa: F811
    from trident.infer.hf_export import export_hf

    path, _, text = trained_checkpoint
    export_hf(path, tmp_path / "hf")
    tasks = _write_tasks(tmp_path, text)
    ours, theirs = _harness([("trident", f"checkpoint={path}"), ("hf", f"pretrained={tmp_path / 'hf'}")], tasks)
    for task in NAMES:
        numbers = {k: v for k, v in theirs[task].items() if isinstance(v, float) and "stderr" not in k}
        assert numbers, theirs[task]
        for metric, value in numbers.items():
            assert ours[task][metric] == pytest.approx(value, rel=1e-4), (task, metric)


def test_generate_until_is_greedy_kv_cached_decoding_cut_at_the_stop_string(trained_checkpoint):  # noqa: F811
    from types import SimpleNamespace

    from trident.evaluate.lm_eval_model import TridentLM
    from trident.infer.generate import generate

    path, tokenizer, _ = trained_checkpoint
    lm = TridentLM.create_from_arg_string(f"checkpoint={path},batch_size=2")
    prompt = "def read_file(path):"
    full = generate(lm.scorer.forward, tokenizer, prompt, 8, greedy=True)  # prompt + 8 fit the 32-token window
    stop = full[len(full) // 2: len(full) // 2 + 2]
    assert stop and stop in full
    (cut, whole) = lm.generate_until([SimpleNamespace(args=(prompt, {"until": [stop], "max_gen_toks": 8})),
                                      SimpleNamespace(args=(prompt, {"until": [], "max_gen_toks": 8}))])
    assert whole == full and cut == full[: full.index(stop)]
