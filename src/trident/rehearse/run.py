"""Rehearse chosen ranks of a layout, each in a fresh process, beside `trident plan`'s prediction.

A fresh process per rank: the fake process group is per process, and each rank's resident memory
(the figure that says whether a laptop can rehearse it) is then its own. Each is forked from a server
that has imported the training code once (hardware.clean_process_context), not started from nothing.
"""
from __future__ import annotations

from trident.config import Config
from trident.hardware import clean_process_context
from trident.plan.memory import Layout, stage_memory
from trident.rehearse.rank import CATEGORIES, default_ranks, rehearse_rank


def planned(config: Config, world_size: int, stage: int, device: str = "cpu") -> dict[str, float]:
    """`trident plan`'s memory of one rank of `stage`, in the rehearsal's categories: the program of
    trident's trainer (fp32 gradient buffers, SDPA, what its autograd graph keeps) on `device`; the
    rehearsal runs the CPU's program (CPU autocast keeps LayerNorm in bf16, CUDA's runs it in fp32).
    Pipeline receive buffers, the loss, ZeRO-2/3's staged gradient buckets and ZeRO-3's gathered
    weights are live during forward/backward, so they count with the activations there; the total is the plan's peak (the reduction follows the backward)."""
    layout = Layout.from_config(config, world_size, grad_dtype="fp32")
    plan = stage_memory(config, layout, stage, flash_attention=True, device=device)
    return {"weights": plan.weights, "gradients": plan.gradients, "optimizer": plan.optimizer,
            "activations": plan.activations + plan.logits + plan.p2p_buffers + plan.staging + plan.gathered,
            "buffers": plan.reduce_buffers,
            "total": plan.total}


def _child(config: Config, world_size: int, rank: int, steps: int) -> dict:
    import torch

    torch.set_num_threads(1)  # fake tensors do no arithmetic: one thread is plenty
    return rehearse_rank(config, world_size, rank, steps)


def rehearse(config: Config, world_size: int, ranks: list[int] | None = None, steps: int = 1,
             on_rank=None, pool=None) -> dict:
    """{"layout": ..., "ranks": [{rank, stage, seconds, measured, plan, plan_cuda, ...}, ...]}; `on_rank(result)`
    is called as each rank finishes. Each rank runs in a fresh process, or, given a `pool` of worker
    processes (a multiprocessing Pool), in that pool, all at once: faster, but a reused process's
    resident memory is no longer its rank's own."""
    p = config.parallel
    ranks = ranks if ranks is not None else default_ranks(config)
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise ValueError(f"--ranks {bad}: outside the world of {world_size} ranks")
    def finish(result: dict) -> dict:
        result["plan"] = planned(config, world_size, result["stage"])
        result["plan_cuda"] = planned(config, world_size, result["stage"], device="cuda")
        if on_rank is not None:
            on_rank(result)
        return result

    jobs = [(config, world_size, rank, steps) for rank in ranks]
    if pool is not None:
        results = [finish(result) for result in pool.starmap(_child, jobs)]
    else:
        results, context = [], clean_process_context(("trident.rehearse.rank",))
        for job in jobs:
            with context.Pool(1) as fresh:
                results.append(finish(fresh.apply(_child, job)))
    layout = {"world_size": world_size, "tp": p.tp, "pp": p.pp, "cp": p.cp, "dp": world_size // (p.tp * p.pp * p.cp),
              "dp_shard": p.dp_shard,
              "virtual_stages": p.virtual_stages, "schedule": p.schedule, "zero_stage": p.zero_stage,
              "micro_batch_size": config.train.micro_batch_size, "global_batch_size": config.train.global_batch_size,
              "activation_checkpointing": config.train.activation_checkpointing, "precision": config.train.precision}
    return {"layout": layout, "ranks": results}


def comparison_rows(result: dict) -> list[tuple[str, float, float]]:
    """(category, measured bytes, planned bytes) for one rank; the last row is peak vs total."""
    measured, plan = result["measured"], result["plan"]
    return [(c, measured[c], plan[c]) for c in CATEGORIES] + [("peak", measured["peak"], plan["total"])]
