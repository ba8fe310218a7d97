"""`trident generate` on the batched, KV-cached engine: several prompts at once, on any TP x PP (x DP)
layout (`parallel.tp=2 parallel.pp=2 --nproc 4`). Every rank runs the same scheduler in lock step
(same prompts, same seed); the sampler's tokens reach every rank; rank 0 prints."""
from __future__ import annotations

import json
import os
import random
import sys
import time


def _forwarded(args, prompts: list[str], seed: int | None) -> list[str]:
    argv = ["generate", args.checkpoint, *args.overrides, "--max-new-tokens", str(args.max_new_tokens),
            "--device", args.device, "--threads", str(args.threads or 1)]
    for prompt in prompts:
        argv += ["--prompt", prompt]
    for flag, value in (("--temperature", args.temperature), ("--top-k", args.top_k), ("--top-p", args.top_p),
                        ("--seed", seed), ("--tokenizer", args.tokenizer)):
        if value is not None:
            argv += [flag, str(value)]
    argv += [flag for flag, on in (("--greedy", args.greedy), ("--no-stop-at-eod", args.no_stop_at_eod),
                                   ("--json", args.json)) if on]
    return argv


def _sampling(args) -> tuple[float, int, float]:
    from trident.infer.generate import check_sampling

    temperature = 0.0 if args.greedy else (1.0 if args.temperature is None else args.temperature)
    top_k, top_p = args.top_k or 0, 1.0 if args.top_p is None else args.top_p
    check_sampling(temperature, top_k, top_p)
    return temperature, top_k, top_p


def _shared_seed(seed: int | None, temperature: float, device: str = "cpu") -> int | None:
    """Rank 0's seed on every rank (only the sampler draws, but every rank reports it), sent as a tensor on
    the run's `device` (NCCL carries only GPU tensors)."""
    import torch
    import torch.distributed as dist

    if temperature == 0:
        return None
    value = torch.tensor([random.SystemRandom().randrange(2**62) if seed is None else seed], device=device)
    if dist.is_initialized():
        dist.broadcast(value, src=0)
    return int(value)


def run_batched(args, prompts: list[str]) -> int:
    from trident.config import ConfigError
    from trident.evaluate.parallel_lm import checkpoint_layout
    from trident.train.launch import (join_serving_group, relaunch_with_torchrun, shutdown_distributed,
                                      torchrun_command, under_torchrun)

    world = int(os.environ.get("WORLD_SIZE", "1")) if under_torchrun() else args.nproc
    try:
        temperature, top_k, top_p = _sampling(args)
        checkpoint_layout(args.checkpoint, args.overrides, world)
    except (ConfigError, FileNotFoundError, ValueError) as error:
        print(f"trident generate: {error}", file=sys.stderr)
        return 2
    if args.nproc > 1 and not under_torchrun():
        seed = _shared_seed(args.seed, temperature)
        return relaunch_with_torchrun(torchrun_command(args.nproc, _forwarded(args, prompts, seed)))[0]
    import torch

    if args.threads or world > 1:  # ranks sharing a machine: one thread each unless told otherwise
        torch.set_num_threads(args.threads or 1)
    if world > 1:  # --device auto is the CPU here (_run_device); cuda: NCCL, the rank's GPU set first
        join_serving_group(_run_device(args))
    try:
        return _generate(args, prompts, temperature, top_k, top_p)
    finally:
        if world > 1:
            shutdown_distributed()


def _generate(args, prompts: list[str], temperature: float, top_k: int, top_p: float) -> int:
    import torch.distributed as dist

    from trident.evaluate.parallel_lm import load_parallel
    from trident.infer.batching import Request, Scheduler
    from trident.infer.engine import Engine

    device = _run_device(args)
    seed = _shared_seed(args.seed, temperature, device)
    lm = load_parallel(args.checkpoint, args.overrides, device=device, tokenizer_path=args.tokenizer)
    tokenizer = lm.codec
    engine = Engine.from_parallel(lm.model, lm.vocab_size, slots=min(len(prompts), 64))
    scheduler = Scheduler(engine, tokenizer.eod_id)
    requests = [Request(tokenizer.encode(p) or [tokenizer.eod_id], args.max_new_tokens, temperature, top_k, top_p,
                        seed, stop_at_eod=not args.no_stop_at_eod) for p in prompts]
    start = time.perf_counter()
    try:
        for request in requests:
            scheduler.submit(request)
    except ValueError as error:
        print(f"trident generate: {error}; lower --max-new-tokens or shorten the prompt", file=sys.stderr)
        return 1
    scheduler.run_until_done()
    seconds = time.perf_counter() - start
    if dist.is_initialized() and dist.get_rank() != 0:
        return 0
    results = [{"prompt": p, "completion": tokenizer.decode(r.new_ids), "prompt_tokens": len(r.prompt_ids),
                "new_tokens": len(r.new_ids), "new_ids": r.new_ids, "stop_reason": _stop_reason(r.finish_reason),
                "seed": seed} for p, r in zip(prompts, requests)]
    if args.json:
        total = sum(r["new_tokens"] for r in results)
        print(json.dumps({"results": results, "seconds": seconds, "tokens_per_s": total / seconds if seconds else 0,
                          "layout": lm.describe()["parallel"]}))
        return 0
    for result in results:
        print(result["prompt"] + result["completion"])
    return 0


def _run_device(args) -> str:
    """--device auto is the CPU for generation; cuda, cuda:N as given."""
    return "cpu" if args.device == "auto" else args.device


def _stop_reason(finish_reason: str) -> str:
    return {"stop": "eod", "length": "max_new_tokens"}.get(finish_reason, finish_reason)
