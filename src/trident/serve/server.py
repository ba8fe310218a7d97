"""Start serving on this rank: every rank loads its chunk of the checkpoint for the layout; rank 0
runs the HTTP server and the engine thread, which broadcasts each step's plan; the other ranks
follow the plans until rank 0 says stop (after a SIGTERM has drained the requests in flight)."""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass

import torch.distributed as dist

from trident.evaluate.parallel_lm import load_parallel
from trident.infer.engine import Engine
from trident.serve.app import build_app, run_app
from trident.serve.chat_template import ChatTemplate
from trident.text.storage import location
from trident.serve.worker import EngineLoop

log = logging.getLogger("trident.serve")


@dataclass
class ServeOptions:
    checkpoint: str
    overrides: list[str]
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 16
    model_name: str | None = None
    device: str = "cpu"
    dtype: str = "fp32"
    tokenizer: str | None = None
    shutdown_timeout: float = 60.0
    chat_template: str | None = None  # a jinja2 file; default: the checkpoint's own template


def load_engine(options: ServeOptions) -> tuple[Engine, object, dict]:
    """(engine, tokenizer, model info) for this rank's share of the layout."""
    lm = load_parallel(options.checkpoint, options.overrides, batch_size=options.max_batch, device=options.device,
                       tokenizer_path=options.tokenizer, dtype=options.dtype)
    engine = Engine.from_parallel(lm.model, lm.vocab_size, slots=options.max_batch)
    return engine, lm.codec, lm.describe()


def end_tokens(template: ChatTemplate, tokenizer) -> set[int]:
    """The chat template's eos_token, when it is one token other than <|endoftext|>: generation ends there too."""
    ids = tokenizer.encode(template.special["eos_token"])
    return set(ids) if len(ids) == 1 and ids[0] != tokenizer.eod_id else set()


def _log_to_stderr() -> None:
    """The server's own log lines (users, disconnects, internal errors with their tracebacks) on stderr."""
    logger = logging.getLogger("trident.serve")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("trident serve: %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def serve(options: ServeOptions) -> int:
    """Collective over the world: returns when the server has stopped (0) on every rank."""
    engine, tokenizer, info = load_engine(options)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if rank != 0:  # stopped by rank 0 (after it drains), not by the launcher's signals
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)
        engine.follow()
        return 0
    name = options.model_name or info["name"]
    _log_to_stderr()
    template = ChatTemplate.load(location(info["checkpoint"]), options.chat_template)
    loop = EngineLoop(engine, tokenizer.eod_id).start()
    app = build_app(loop, tokenizer, name, engine.seq_length, template, end_tokens(template, tokenizer))
    layout = info.get("parallel", {})

    def ready() -> None:
        print(f"trident serve: {name} on http://{options.host}:{options.port} (tp={layout.get('tp', 1)} "
              f"pp={layout.get('pp', 1)}, {options.max_batch} slots)", file=sys.stderr, flush=True)

    try:
        asyncio.run(run_app(app, options.host, options.port, options.shutdown_timeout, ready))
    finally:
        loop.close()  # in-flight requests finish, then the followers are released
    print("trident serve: stopped", file=sys.stderr, flush=True)
    return 0
