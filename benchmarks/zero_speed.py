"""Step time of ZeRO stages 2 and 3 against stage 1 on dp2, same run (issue 46; target: <= 1.15x).

Two gloo ranks (one thread each) build three Trainers each, the same model and data at
parallel.zero_stage 1, 2 and 3, warm each up, then time steps in rotating order (1 2 3, 3 1 2,
2 3 1, ...) so that machine-load drift hits every stage alike. Per stage: the median step time over
the timed steps, by wall clock (the slower rank's) and by CPU time (this process's, gloo's threads
included: the work done, which other jobs taking the cores do not inflate), and the DP bytes each
rank sent per step (metrics' dp_comm_bytes; docs/training.md's formula). The ratio is stage N's
median over stage 1's.

    python benchmarks/zero_speed.py [--steps N] [--quick]
"""
from __future__ import annotations

import argparse
import tempfile

from common import RandomTokens, Timer, emit_json, load_average, make_config, median, print_table, run_ranks

STAGES = (1, 2, 3)
# Matmuls dominate a step (~1-3 s on 2 loaded cores); 2 micro-batches a rank per step, so stage 2
# reduces its gradients twice and stage 3 gathers its weights four times a step.
MODEL = ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
         "model.vocab_size=4096", "train.global_batch_size=16", "train.micro_batch_size=4"]
QUICK = ["model.num_layers=2", "model.hidden_size=128", "model.seq_length=128", "train.global_batch_size=8",
         "train.micro_batch_size=2"]


def _worker(rank, world, overrides, steps):
    import torch.distributed as dist

    from trident.train.trainer import Trainer

    trainers = {}
    for stage in STAGES:
        config = make_config("demo", overrides + [f"parallel.zero_stage={stage}"])
        out = tempfile.mkdtemp()
        trainers[stage] = Trainer(config, out, datasets=(RandomTokens(config.model.seq_length, config.model.vocab_size),
                                                         None), vocab_size=config.model.vocab_size, log=lambda *a: None)
        for _ in range(2):  # warm-up: allocator, kernels, the first gathers
            trainers[stage].train_step()
    wall, cpu, sent = {s: [] for s in STAGES}, {s: [] for s in STAGES}, {}
    for step in range(steps):
        order = STAGES[step % 3:] + STAGES[:step % 3]
        for stage in (order if step % 2 == 0 else order[::-1]):
            dist.barrier()
            with Timer() as timer:
                record = trainers[stage].train_step()
            wall[stage].append(timer.wall)
            cpu[stage].append(timer.cpu)
            sent[stage] = record["dp_comm_bytes"]
    return wall, cpu, sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="timed steps per stage")
    parser.add_argument("--quick", action="store_true", help="a smaller model")
    args = parser.parse_args()
    overrides = MODEL + (QUICK if args.quick else []) + [
        "parallel.dp=2", "train.rampup_batch_size=null", "train.eval_interval=0", "train.steps=1000000",
        "train.device=cpu", "train.threads=1", "diagnostics.straggler_interval=0",
        "diagnostics.weight_check_interval=0"]
    ranks = run_ranks(_worker, 2, overrides, args.steps, threads=1, timeout=3600)
    rows, figures = [], {}
    walls = {s: [max(step) for step in zip(*(r[0][s] for r in ranks))] for s in STAGES}  # the slower rank
    cpus = {s: [c for r in ranks for c in r[1][s]] for s in STAGES}
    for stage in STAGES:
        figures[stage] = {"wall_s": median(walls[stage]), "cpu_s": median(cpus[stage]),
                          "dp_comm_bytes": ranks[0][2][stage]}
    for stage in STAGES:
        f = figures[stage]
        f["wall_ratio"], f["cpu_ratio"] = f["wall_s"] / figures[1]["wall_s"], f["cpu_s"] / figures[1]["cpu_s"]
        rows.append([stage, f["wall_s"], f["wall_ratio"], f["cpu_s"], f["cpu_ratio"], f["dp_comm_bytes"] / 2**20])
    print_table(f"ZeRO stages on dp2, median of {args.steps} steps each (ratio: over stage 1; target <= 1.15)",
                ["stage", "wall s", "wall ratio", "CPU s", "CPU ratio", "DP MiB sent per rank"], rows)
    emit_json("zero_speed", {"stages": figures, "steps": args.steps, "overrides": overrides, "load": load_average()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
