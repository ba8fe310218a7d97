"""`trident serve CKPT [parallel.tp=T parallel.pp=P] [--nproc N] [--host 127.0.0.1] [--port 8000] [--max-batch B]`:
the OpenAI completions and chat completions APIs (POST /v1/completions, /v1/chat/completions; GET
/v1/models, /health, /metrics) over a checkpoint on its own layout, with continuous batching. With --nproc N > 1 the ranks are started with torchrun;
rank 0 serves and drives the others. SIGTERM (or Ctrl-C) finishes the requests in flight, then exits."""
from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint folder (step_N/) or a folder of them (the newest is used)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="parallel.KEY=VALUE",
                        help="the serving layout: parallel.tp, parallel.pp, parallel.dp, parallel.sequence_parallel")
    parser.add_argument("--nproc", type=int, default=1, metavar="N", help="local ranks (started with torchrun)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--max-batch", type=int, default=16, metavar="B",
                        help="sequences decoded together (KV-cache slots); more requests wait (default 16)")
    parser.add_argument("--model-name", default=None, help="the model id in responses (default: RUN/step_N)")
    parser.add_argument("--tokenizer", default=None, metavar="PATH", help="when the checkpoint holds none")
    parser.add_argument("--chat-template", default=None, metavar="FILE",
                        help="a jinja2 chat template for /v1/chat/completions (default: the checkpoint's "
                             "chat_template.jinja, else tokenizer_config.json's chat_template)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (each rank its own GPU)")
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--threads", type=int, default=0, metavar="N", help="torch CPU threads per rank")
    parser.add_argument("--shutdown-timeout", type=float, default=60.0, metavar="S",
                        help="on SIGTERM, seconds to let in-flight requests finish (default 60)")


def _usage_problem(args) -> str | None:
    if args.max_batch < 1:
        return f"--max-batch must be >= 1, got {args.max_batch}"
    if not 0 <= args.port <= 65535:
        return f"--port must be in 0..65535, got {args.port}"
    if args.nproc < 1:
        return f"--nproc must be >= 1, got {args.nproc}"
    return None


def forwarded_argv(args) -> list[str]:
    argv = ["serve", args.checkpoint, *args.overrides, "--host", args.host, "--port", str(args.port),
            "--max-batch", str(args.max_batch), "--device", args.device, "--dtype", args.dtype,
            "--threads", str(args.threads), "--shutdown-timeout", str(args.shutdown_timeout)]
    for flag, value in (("--model-name", args.model_name), ("--tokenizer", args.tokenizer),
                        ("--chat-template", args.chat_template)):
        if value is not None:
            argv += [flag, value]
    return argv


def run(args) -> int:
    problem = _usage_problem(args)
    if problem:
        print(f"trident serve: {problem}", file=sys.stderr)
        return 2
    from trident.config import ConfigError
    from trident.evaluate.parallel_lm import checkpoint_layout
    from trident.serve.chat_template import ChatTemplate, TemplateProblem
    from trident.text.storage import location
    from trident.train.launch import (join_serving_group, relaunch_with_torchrun, shutdown_distributed,
                                      torchrun_command, under_torchrun)

    if not location(args.checkpoint).exists():
        print(f"trident serve: {args.checkpoint}: no such file or folder (give a checkpoint step_N/ folder, "
              f"or a run's folder of them)", file=sys.stderr)
        return 2
    world = int(os.environ.get("WORLD_SIZE", "1")) if under_torchrun() else args.nproc
    try:  # a layout that does not fit the model, or an unusable chat template, fails here, before any rank starts
        reader, _ = checkpoint_layout(args.checkpoint, args.overrides, world)
        ChatTemplate.load(reader.path, args.chat_template)
    except (ConfigError, FileNotFoundError, TemplateProblem) as error:
        print(f"trident serve: {error}", file=sys.stderr)
        return 2
    if args.nproc > 1 and not under_torchrun():
        return relaunch_with_torchrun(torchrun_command(args.nproc, forwarded_argv(args)))[0]
    import torch

    from trident.serve.server import ServeOptions, serve

    if args.threads:
        torch.set_num_threads(args.threads)
    if world > 1:
        join_serving_group(args.device)
    options = ServeOptions(args.checkpoint, list(args.overrides), args.host, args.port, args.max_batch,
                           args.model_name, args.device, args.dtype, args.tokenizer, args.shutdown_timeout,
                           args.chat_template)
    try:
        return serve(options)
    finally:
        if world > 1:
            shutdown_distributed()
