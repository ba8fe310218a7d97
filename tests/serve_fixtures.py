"""Shared helpers for the serving and parallel-generation tests: a tiny checkpoint with a long
context (and, when asked, the Hugging Face chat files beside its tokenizer.json), `trident serve`
started on a free 127.0.0.1 port (and stopped), and single-process greedy references to compare
every served or parallel result with."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from eval_fixtures import save_trident_checkpoint, tiny_model, tiny_tokenizer
from trident.train.launch import free_port

PROMPTS = ["Question: How do you clean a window?\nAnswer:", "The", "A man fills the sink with water. he",
           "True or False:", "Neither yes no", "[header] How to water plants", "winter clothes", "Answer: True"]


# a small template in the shape of the Hub's: bos, role lines, raise_exception on a bad role, a generation prompt
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Only system, user and assistant roles are supported') }}{% endif %}"
    "{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")
TOKENIZER_CONFIG = {"bos_token": {"content": "<|endoftext|>", "special": True}, "eos_token": "<|endoftext|>",
                    "model_max_length": 384, "tokenizer_class": "PreTrainedTokenizerFast",
                    "chat_template": CHAT_TEMPLATE}


def serving_checkpoint(root: Path, seq_length: int = 384, chat_files: dict[str, str] | None = None):
    """(checkpoint path, tokenizer): 2 layers, 4 heads, a context long enough to stream for a while.
    chat_files: {name: text} written beside tokenizer.json (e.g. tokenizer_config.json,
    chat_template.jinja), through the checkpoint writer's extra_files as import-hf writes them."""
    tokenizer = tiny_tokenizer(root)
    if not chat_files:
        path, _ = save_trident_checkpoint(tokenizer, root, seq_length=seq_length)
        return path, tokenizer
    from trident.checkpoint.writer import save_checkpoint
    from trident.config import Config
    from trident.parallel.mesh import Mesh
    from trident.parallel.state import weight_pieces

    model, cfg = tiny_model(tokenizer, seq_length=seq_length, seed=3)
    config = Config()
    config.model = cfg
    extra = {"tokenizer.json": tokenizer.save(root / "tokenizer.json")}
    for name, text in chat_files.items():
        (root / name).write_text(text)
        extra[name] = root / name
    path = save_checkpoint(root / "checkpoints", 1, weight_pieces(list(model.named_parameters())),
                           {"config": config.to_dict(), "step": 1}, Mesh(), extra_files=extra)
    return path, tokenizer


def chat_checkpoint(root: Path, seq_length: int = 384):
    """A serving checkpoint whose tokenizer_config.json holds CHAT_TEMPLATE."""
    return serving_checkpoint(root, seq_length, {"tokenizer_config.json": json.dumps(TOKENIZER_CONFIG)})


class Server:
    """`trident serve CKPT ...` in a subprocess on a free port; `url`, `get`, `post`; `stop` sends SIGTERM."""

    def __init__(self, checkpoint, *args: str, nproc: int = 1, timeout: float = 90.0):
        self.checkpoint = checkpoint
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "trident", "serve", str(checkpoint), *args, "--port", str(self.port),
                   "--threads", "1", "--nproc", str(nproc)]
        self.log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"trident-serve-{self.port}.log", "w+")
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=dict(os.environ, OMP_NUM_THREADS="1"))
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.get("/health")["status"] == "ok":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server did not start:\n{self.output()}")
            time.sleep(0.2)

    def get(self, path: str, timeout: float = 10) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
            return json.loads(response.read())

    def post(self, path: str, body, timeout: float = 60) -> tuple[int, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def raw(self, method: str, path: str, body: bytes | None = None, timeout: float = 30):
        """(status, content type, decoded JSON or text) for any method and path, errors included."""
        request = urllib.request.Request(self.url + path, data=body, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as error:
            response = error
        with response:
            data, kind = response.read(), response.headers.get("Content-Type", "")
        return response.status, kind, json.loads(data) if kind.startswith("application/json") else data.decode()

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (what a process manager sends), then wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:  # the whole session: torchrun and its ranks too
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def greedy_reference(checkpoint, prompts: list[str], max_tokens: int) -> dict[str, str]:
    """prompt -> the continuation one process writes greedily (stopping at <|endoftext|>)."""
    from trident.checkpoint.reader import load_for_inference
    from trident.infer.generate import generate_result

    model, tokenizer, _ = load_for_inference(checkpoint)
    return {p: generate_result(model, tokenizer, p, max_tokens, greedy=True).text for p in prompts}


def engine_reference(checkpoint, prompts: list[list[int]], slots: int = 4, **request) -> list[list[int]]:
    """The tokens one process's continuous-batching engine generates for each prompt (a Request each
    with these settings): what a served request must return, at any layout."""
    from trident.checkpoint.reader import load_for_inference
    from trident.infer.batching import Request, Scheduler
    from trident.infer.engine import Engine

    model, tokenizer, _ = load_for_inference(checkpoint)
    scheduler = Scheduler(Engine.single(model, tokenizer.vocab_size, slots=slots), tokenizer.eod_id)
    requests = [Request(list(ids), **request) for ids in prompts]
    for r in requests:
        scheduler.submit(r)
    scheduler.run_until_done()
    return [r.new_ids for r in requests]

