"""What keeping freed memory in the process (train.malloc_keep_freed, train/allocator.py) saves on
this CPU: the thread CPU time of one pipeline stage's micro-batches, glibc's default allocator
against the trainer's setting, in the 1F1B order and in ZB-H2's (which holds every micro-batch's
activations and defers the weight gradients: the most memory churn).

The stage is the one benchmarks/pipeline_deepspeed.py and pipeline.py measure at pp 2: 2 GPT blocks
x 256, 8 heads, seq 256, micro-batch 4, fp32, one thread on one pinned core; a step is 4
micro-batches in stage 0's compute order of the list gloo runs (overlap.schedule_for, overlapped):
1F1B with its slack, plain backward; ZB-H2 with Backward (input gradient) and BackwardWeight (the
deferred weight gradients) apart. No transfers: only what the stage computes. Each (allocator, order) runs in a
fresh process (glibc's state cannot be reset in one), the variants alternate over the rounds, and
the table gives the median per step with the minor page faults per step.

    python benchmarks/allocator.py [--rounds 5] [--steps 8]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from common import emit_json, load_average, median, print_table

ORDERS = ("1f1b", "zb-h2")
VARIANTS = ("default", "keep")


def stage_order(schedule: str) -> list[tuple[str, int]]:
    """Stage 0's computes at pp 2, m 4 under the overlapped contract: (timeline kind, micro-batch)."""
    from trident.parallel.pipeline.overlap import schedule_for
    from trident.parallel.pipeline.schedules import COMPUTE, COMPUTE_KIND

    ops = schedule_for(schedule, 2, 4, 1, "overlapped")[0]
    return [(COMPUTE_KIND[type(op)], op.microbatch) for op in ops if isinstance(op, COMPUTE)]


def child(variant: str, order: str, steps: int) -> dict:
    """Time `steps` steps of `order` in this process (after two warm-up steps)."""
    import torch

    from trident.config import ModelConfig
    from trident.model.gpt import Block
    from trident.parallel.tensor import NO_TP
    from trident.parallel.weight_grad import deferring_weight_grads, flush
    from trident.train.allocator import keep_freed_memory

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    if variant == "keep":
        keep_freed_memory()
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, hidden_size=256, num_heads=8, seq_length=256)
    stage = torch.nn.Sequential(*[Block(cfg, NO_TP) for _ in range(2)])
    for p in stage.parameters():
        torch.nn.init.normal_(p, std=0.02)
    inputs, grad = [torch.randn(256, 4, 256) for _ in range(4)], torch.randn(256, 4, 256)
    ops = stage_order(order)
    split = any(kind == "weight" for kind, _ in ops)  # zero-bubble: weight gradients deferred

    def step():
        outputs, queues = {}, {}
        for kind, mb in ops:
            if kind == "forward":
                x, queues[mb] = inputs[mb].clone().requires_grad_(), []
                with deferring_weight_grads(queues[mb]) if split else torch.enable_grad():
                    outputs[mb] = stage(x)
            elif kind == "backward":
                outputs.pop(mb).backward(grad)
            else:
                flush(queues.pop(mb))

    for _ in range(2):
        step()
    seconds, faults = [], []
    for _ in range(steps):
        before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.thread_time()
        step()
        seconds.append(time.thread_time() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return {"seconds": seconds, "faults": faults}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per (allocator, order)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per process")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "ORDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.steps)))
        return 0
    before = load_average()
    runs: dict = {(v, o): {"seconds": [], "faults": []} for o in ORDERS for v in VARIANTS}
    for _ in range(args.rounds):
        for key in runs:  # alternate, so drifts of the machine hit every variant alike
            out = subprocess.run([sys.executable, __file__, "--child", *key, "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True, timeout=600).stdout
            got = json.loads(out.strip().splitlines()[-1])
            for field in ("seconds", "faults"):
                runs[key][field] += got[field]
    step = {key: median(value["seconds"]) for key, value in runs.items()}
    rows = [[order, variant, f"{step[(variant, order)] * 1e3:.1f}", f"{median(runs[(variant, order)]['faults']):.0f}",
             f"{step[('default', order)] / step[(variant, order)]:.3f}x",
             f"{step[(variant, order)] / step[(variant, '1f1b')]:.3f}"]
            for order in ORDERS for variant in VARIANTS]
    print_table(f"One pp-2 stage, 4 micro-batches a step, thread CPU ms per step: median of {args.rounds} "
                f"processes x {args.steps} steps (load 1m {before['load_1m']} -> {load_average()['load_1m']})",
                ["order", "allocator", "CPU ms / step", "page faults / step", "speed-up vs default",
                 "CPU vs 1F1B (same allocator)"], rows)
    emit_json("allocator", {"rounds": args.rounds, "steps": args.steps,
                            "median_step_s": {f"{v}/{o}": s for (v, o), s in step.items()},
                            "median_faults": {f"{v}/{o}": median(r["faults"]) for (v, o), r in runs.items()},
                            "load_before": before, "load_after": load_average()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
