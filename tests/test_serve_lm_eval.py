"""lm-evaluation-harness against `trident serve` (the serving tests' shared server, a checkpoint with
a Hugging Face chat template): `local-completions` scores LAMBADA and HellaSwag (local copies of their
fixtures, offline) exactly as `--model trident` scores the same checkpoint (the harness finds the
server's tokenizer routes, sends token-id prompts with echo + logprobs, and reads each continuation's
log-likelihood and greediness from the OpenAI-format answer); `local-chat-completions` with
--apply_chat_template runs a generation task, each answer the engine's greedy text for the
template-rendered messages, cut at the task's stop sequence."""
from __future__ import annotations

import json

import pytest

from eval_fixtures import FIXTURES, HARNESS_OFFLINE_ENV, harness_lambada_task, harness_results
from serve_fixtures import engine_reference

TASKS = {
    "serve_lambada": harness_lambada_task("serve_lambada", "{fixtures}/lambada/lambada_test.jsonl"),
    "serve_hellaswag": """task: serve_hellaswag
dataset_path: json
dataset_kwargs: {{data_files: {{test: {fixtures}/hellaswag/hellaswag_val.jsonl}}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{activity_label}}}}: {{{{ctx_a}}}} {{{{ctx_b|capitalize}}}}"
doc_to_choice: "{{{{endings}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
""",
}


GENERATION_TASK = """task: serve_chat_lambada
dataset_path: json
dataset_kwargs: {{data_files: {{test: {fixtures}/lambada/lambada_test.jsonl}}}}
test_split: test
output_type: generate_until
doc_to_text: "Complete: {{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{text.split(' ')[-1]}}}}"
generation_kwargs:
  until: ["es"]
  max_gen_toks: 8
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
"""


@pytest.fixture(scope="module")
def server(chat_server):
    return chat_server


@pytest.fixture(scope="module")
def checkpoint(server):
    return server.checkpoint, server.tokenizer


@pytest.mark.timeout(300)
def test_local_completions_scores_like_model_trident(tmp_path, checkpoint, server):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, body in TASKS.items():
        (tasks / f"{name}.yaml").write_text(body.format(fixtures=FIXTURES))
    remote = f"base_url={server.url}/v1/completions,model=tiny,num_concurrent=2,max_retries=1"
    ours, served = harness_results(tasks, list(TASKS), [("trident", f"checkpoint={checkpoint[0]}"),
                                                        ("local-completions", remote)])
    for task in TASKS:
        numbers = {k: v for k, v in ours[task].items() if isinstance(v, float) and "stderr" not in k}
        assert len(numbers) == 2, ours[task]
        for metric, value in numbers.items():
            assert served[task][metric] == pytest.approx(value, rel=1e-5), (task, metric)


@pytest.mark.timeout(180)
def test_local_chat_completions_runs_a_generation_task(tmp_path, checkpoint, server):
    import lm_eval
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    from trident.serve.chat_template import ChatTemplate

    (tmp_path / "serve_chat_lambada.yaml").write_text(GENERATION_TASK.format(fixtures=FIXTURES))
    remote = f"base_url={server.url}/v1/chat/completions,model=tiny,num_concurrent=2,max_retries=1"
    with pytest.MonkeyPatch.context() as patch:
        for key, value in HARNESS_OFFLINE_ENV.items():
            patch.setenv(key, value)
        lm = get_model("local-chat-completions").create_from_arg_string(remote, {"batch_size": 1, "device": "cpu"})
        tasks = TaskManager(include_path=str(tmp_path), include_defaults=False).load(["serve_chat_lambada"])
        out = lm_eval.evaluate(lm=lm, task_dict=tasks, bootstrap_iters=0, apply_chat_template=True, log_samples=True)
    samples = out["samples"]["serve_chat_lambada"]
    assert len(samples) == 4 and "exact_match,none" in out["results"]["serve_chat_lambada"]
    path, tokenizer = checkpoint
    template = ChatTemplate.load(path)
    prompts = [tokenizer.encode(template.render(json.loads(s["arguments"][0][0][0]))) for s in samples]
    full = [tokenizer.decode(ids) for ids in engine_reference(path, prompts, max_new_tokens=8)]
    assert [s["resps"][0][0] for s in samples] == [text.split("es")[0] for text in full]
    assert any("es" in text for text in full)  # the stop sequence did cut some answer
