"""Shared helpers for the tests/test_eval_*.py files: a tiny tokenizer and a tiny trident GPT."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from trident.config import Config, ModelConfig
from trident.data.tokenizer import Tokenizer, train_tokenizer
from trident.evaluate.lm import CausalLM, trident_lm
from trident.model.gpt import build_model

# lm-evaluation-harness offline: nothing from the hub, no tokenizer thread pools
HARNESS_OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "TOKENIZERS_PARALLELISM": "false"}
# a 3-way multiple-choice harness task over a local JSON file ({data}); {metrics}: its metric_list lines
HARNESS_MC_TASK = """task: tiny_mc
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
{metrics}"""


HARNESS_LAMBADA_TASK = """task: {name}
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data_file}}}}}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{' '+text.split(' ')[-1]}}}}"
metric_list:
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def harness_lambada_task(name: str, data_file: str) -> str:
    """A LAMBADA-style harness task (JSONL rows {"text": ...}, the last word the target) as a
    template the caller still .format()s: `data_file` may hold its own {placeholder}."""
    return HARNESS_LAMBADA_TASK.replace("{name}", name).replace("{data_file}", data_file)


def harness_sentences(text: str, count: int = 12) -> list[str]:
    """The first `count` sentences of more than 6 words in `text` (the harness tests' documents)."""
    return [s.strip() for s in text.replace("\n", " ").split(". ") if len(s.split()) > 6][:count]


def write_harness_mc_data(path: Path, text: str) -> Path:
    """HARNESS_MC_TASK's data: 8 questions (a sentence's first 3 words) with 3 choices each."""
    with open(path, "w") as f:
        for i, s in enumerate(harness_sentences(text, 8)):
            words = s.split()
            choices = [" ".join(words[3:6]), " ".join(words[-3:]), " ".join(reversed(words[:3]))]
            f.write(json.dumps({"question": " ".join(words[:3]), "choices": choices, "label": i % 3}) + "\n")
    return path

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


def fixture_texts() -> list[str]:
    """Every string value in the fixture files, so the tokenizer covers the prompts' words."""
    texts = []

    def collect(value):
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)
        elif isinstance(value, list):
            for v in value:
                collect(v)

    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix in (".jsonl",):
            for line in path.read_text().splitlines():
                collect(json.loads(line))
        elif path.suffix == ".txt":
            texts.append(path.read_text())
    return texts


def tiny_tokenizer(tmp_dir: Path, vocab_size: int = 400) -> Tokenizer:
    corpus = tmp_dir / "corpus.txt"
    corpus.write_text("\n".join(fixture_texts() + ["Question: Answer: True False Neither yes no"] * 3))
    return train_tokenizer([corpus], vocab_size, tmp_dir / "tokenizer.json")


def tiny_model(tokenizer: Tokenizer, seq_length: int = 64, seed: int = 0, layers: int = 2, hidden: int = 32):
    cfg = ModelConfig(num_layers=layers, hidden_size=hidden, num_heads=4, seq_length=seq_length,
                      vocab_size=tokenizer.vocab_size)
    return build_model(cfg, cfg.padded_vocab_size(), seed=seed), cfg


def tiny_lm(tokenizer: Tokenizer, seq_length: int = 64, seed: int = 0, batch_size: int = 4) -> CausalLM:
    torch.manual_seed(seed)
    model, cfg = tiny_model(tokenizer, seq_length, seed)
    return trident_lm(model, tokenizer, cfg.seq_length, batch_size=batch_size)


def save_trident_checkpoint(tokenizer, root, seq_length: int = 128):
    from trident.checkpoint.writer import save_checkpoint
    from trident.parallel.mesh import Mesh
    from trident.parallel.state import weight_pieces

    model, cfg = tiny_model(tokenizer, seq_length=seq_length, seed=3)
    config = Config()
    config.model = cfg
    token_file = root / "tokenizer.json"
    tokenizer.save(token_file)
    path = save_checkpoint(root / "checkpoints", 1, weight_pieces(list(model.named_parameters())),
                           {"config": config.to_dict(), "step": 1}, Mesh(),
                           extra_files={"tokenizer.json": token_file})
    return path, model


def train_plain_loop(model, tokenizer, lines, steps=120, seq=24, batch=16):
    ids = []
    for line in lines:
        ids += tokenizer.encode(line) + [tokenizer.eod_id]
    data = torch.tensor(ids)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=generator)
        x = torch.stack([data[s: s + seq] for s in starts])
        y = torch.stack([data[s + 1: s + seq + 1] for s in starts])
        loss = model(x, labels=y).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()


TRIVIAQA_DEV = ("verified-web-dev.json", "verified-wikipedia-dev.json", "web-dev.json", "wikipedia-dev.json")
TRIVIAQA_TRAIN = ("web-train.json", "wikipedia-train.json")


def write_triviaqa(root: Path, dev: list[tuple[str, list[str]]], train: list[tuple[str, list[str]]]) -> dict:
    """root/triviaqa/qa/*.json in the published format from (question, aliases) pairs, each split cut into
    contiguous parts over its files; returns split -> the same questions as hub rows, in the hub's order."""
    folder = root / "triviaqa" / "qa"
    folder.mkdir(parents=True, exist_ok=True)
    rows = {}
    for split, items, files in (("validation", dev, TRIVIAQA_DEV), ("train", train, TRIVIAQA_TRAIN)):
        size = -(-len(items) // len(files))
        for f, name in enumerate(files):
            part = items[f * size: (f + 1) * size]
            data = [{"Question": q, "QuestionId": f"{split}_{f}_{i}", "QuestionSource": "test",
                     "Answer": {"Aliases": aliases, "Value": aliases[0]}} for i, (q, aliases) in enumerate(part)]
            (folder / name).write_text(json.dumps({"Data": data, "Version": 1.0}))
        rows[split] = [{"question": q, "answer": {"aliases": aliases}} for q, aliases in items]
    return rows


def harness_results(tasks_dir: Path, names: list[str], models: list[tuple[str, str]],
                    num_fewshot: int | None = None) -> list[dict]:
    """lm-evaluation-harness on each (model, model_args) in turn over the tasks of `tasks_dir` alone: its
    results per task. In this process (torch and the model classes load once per test worker, not once per
    interpreter) and offline, through `lm_eval.evaluate`, the harness's documented low-level entry, with the
    models and tasks set up as simple_evaluate sets them up; what is left out is its report of the
    environment (a `pip list` each call) and its bootstrap stderr (pool processes; no test reads a stderr)."""
    import inspect

    import datasets
    import huggingface_hub
    import lm_eval
    import pytest
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    import trident.evaluate.lm_eval_model  # noqa: F401  (registers --model trident)

    manager = TaskManager(include_path=str(tasks_dir), include_defaults=False)
    seed = inspect.signature(lm_eval.simple_evaluate).parameters["fewshot_random_seed"].default
    results = []
    with pytest.MonkeyPatch.context() as patch:
        for key, value in HARNESS_OFFLINE_ENV.items():
            patch.setenv(key, value)
        patch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # read at import: the variable alone is too late
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        for model, args in models:
            lm = get_model(model).create_from_arg_string(args, {"batch_size": 4, "max_batch_size": None,
                                                                "device": "cpu"})
            tasks = manager.load(list(names))
            for task in tasks["tasks"].values():  # simple_evaluate's rules: a config's 0 shots stay 0
                default = task.get_config("num_fewshot")
                if (num_fewshot is not None and default != 0) or default is None:
                    task.set_config(key="num_fewshot", value=num_fewshot or 0)
                task.set_fewshot_seed(seed=seed)
            results.append(lm_eval.evaluate(lm=lm, task_dict=tasks, bootstrap_iters=0)["results"])
    return results
