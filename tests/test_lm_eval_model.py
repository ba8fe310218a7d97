"""lm-evaluation-harness scores a trident checkpoint through `--model trident` exactly as it scores
the same checkpoint exported to Hugging Face (`--model hf`): a multiple-choice task, LAMBADA (acc
and perplexity) and a rolling-loglikelihood task, all read from local files (no hub, no network)."""
import json

import pytest

from eval_fixtures import (HARNESS_MC_TASK, harness_lambada_task, harness_results, harness_sentences,
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


@pytest.mark.timeout(300)
def test_harness_scores_trident_like_its_hugging_face_export(trained_checkpoint, tmp_path):  # noqa: F811
    from trident.infer.hf_export import export_hf

    path, _, text = trained_checkpoint
    export_hf(path, tmp_path / "hf")
    tasks = _write_tasks(tmp_path, text)
    ours, theirs = harness_results(tasks, NAMES, [("trident", f"checkpoint={path}"),
                                                  ("hf", f"pretrained={tmp_path / 'hf'}")])
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
