"""lm-evaluation-harness's `local-completions` model against `trident serve` scores LAMBADA and HellaSwag
(local copies of their fixtures, offline) exactly as `--model trident` scores the same checkpoint:
the harness finds the server's tokenizer routes, sends token-id prompts with echo + logprobs, and reads
each continuation's log-likelihood and greediness from the OpenAI-format answer."""
from __future__ import annotations

import pytest

from eval_fixtures import FIXTURES, harness_lambada_task, harness_results
from serve_fixtures import Server, serving_checkpoint

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


@pytest.mark.timeout(300)
def test_local_completions_scores_like_model_trident(tmp_path):
    checkpoint, _ = serving_checkpoint(tmp_path)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, body in TASKS.items():
        (tasks / f"{name}.yaml").write_text(body.format(fixtures=FIXTURES))
    server = Server(checkpoint, "--max-batch", "8", "--model-name", "tiny")
    try:
        remote = f"base_url={server.url}/v1/completions,model=tiny,num_concurrent=2,max_retries=1"
        ours, served = harness_results(tasks, list(TASKS), [("trident", f"checkpoint={checkpoint}"),
                                                            ("local-completions", remote)])
        assert server.stop() == 0
    finally:
        server.kill()
    for task in TASKS:
        numbers = {k: v for k, v in ours[task].items() if isinstance(v, float) and "stderr" not in k}
        assert len(numbers) == 2, ours[task]
        for metric, value in numbers.items():
            assert served[task][metric] == pytest.approx(value, rel=1e-5), (task, metric)
