"""The sbatch script `trident launch` writes: one `trident train` launcher per node (srun), torchrun's
c10d rendezvous on the first node, Slurm's USR1 warning ahead of the time limit (every rank saves
and stops, exit 75), and a requeue of the job when it stopped that way.

The warning's lead time comes from the plan: two steps plus a synchronous save of the node's
checkpoint shards at `write_gbs`, plus a minute, so that the save completes before Slurm's SIGKILL.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from trident.config import Config
from trident.plan.search import Plan
from trident.train.launch import NCCL_ENV as RANK_NCCL_ENV

RDZV_PORT = 29500
SCRIPT_MARK = "# Written by `trident launch`"  # a launch.sbatch trident wrote (and may write again) starts so
# What a 2,240-GPU job needs from NCCL and torch: init_distributed's own (train/launch.py: a failed or
# timed-out collective aborts its communicator and raises; torch's flight recorder on, dumped on a
# timeout), exported in the script so that torchrun and NCCL see them too, and NCCL's warnings.
NCCL_ENV = {**RANK_NCCL_ENV, "NCCL_DEBUG": "WARN"}


@dataclass
class Job:
    config_arg: str  # the CONFIG argument as the user gave it (a path or preset name)
    overrides: list[str]
    out: str
    nodes: int
    gpus_per_node: int
    min_nodes: int = 0  # > 0 and < nodes: elastic, goes on with as few as this many nodes
    partition: str = ""
    time: str = ""  # Slurm's --time, e.g. 2-00:00:00
    max_restarts: int = 3
    write_gbs: float = 2.0  # checkpoint write bandwidth of one node, GB/s
    job_name: str = "trident"


def checkpoint_bytes_per_node(plan: Plan, gpus_per_node: int) -> float:
    """What one node writes at a save at most: every GPU's weights and its optimizer state."""
    memory = plan.memory
    return 0.0 if memory is None else gpus_per_node * (memory.weights + memory.optimizer)


def signal_lead_seconds(plan: Plan, job: Job, async_save: bool = False) -> int:
    """Seconds before the time limit at which Slurm sends USR1: two steps, the background save a stop
    waits for (with async_save), the stop's own save, one minute of slack."""
    step = plan.time.total if plan.time else 0.0
    save = checkpoint_bytes_per_node(plan, job.gpus_per_node) / (job.write_gbs * 1e9) * (2 if async_save else 1)
    return max(120, int(math.ceil((2 * step + save + 60) / 60.0)) * 60)


def _quote(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def sbatch_script(job: Job, config: Config, plan: Plan) -> str:
    lead = signal_lead_seconds(plan, job, config.checkpoint.async_save)
    out = shlex.quote(job.out)
    elastic = 0 < job.min_nodes < job.nodes
    nnodes = f"{job.min_nodes}:{job.nodes}" if elastic else str(job.nodes)
    overrides = [o for o in job.overrides if not o.startswith("checkpoint.load=")] + ["checkpoint.load=auto"]
    train = ["trident", "train", job.config_arg, *overrides, "--out", job.out, "--nproc", str(job.gpus_per_node),
             "--nnodes", nnodes, "--max-restarts", str(job.max_restarts)]
    memory = plan.memory.total / 2**30 if plan.memory else 0.0
    step = f"{plan.time.total:.2f} s a step, MFU {plan.time.mfu:.1%}" if plan.time else "step time unknown"
    lines = [
        "#!/bin/bash",
        f"{SCRIPT_MARK}; submit with: sbatch {shlex.quote(job.out)}/launch.sbatch",
        f"# Plan ({plan.hardware}): {plan.layout.label()}; {memory:.1f} GiB of {plan.usable_bytes / 2**30:.1f} GiB "
        f"per GPU; {step}",
        f"# USR1 {lead} s before the time limit: every rank saves and stops (exit 75), then the job requeues",
        f"#SBATCH --job-name={job.job_name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={job.gpus_per_node}",
        "#SBATCH --exclusive",
        *([f"#SBATCH --partition={job.partition}"] if job.partition else []),
        *([f"#SBATCH --time={job.time}"] if job.time else []),
        f"#SBATCH --signal=USR1@{lead}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={job.out}/slurm-%j.out",
        *(["#SBATCH --no-kill  # elastic: a lost node does not end the job; the others go on"] if elastic else []),
        "",
        "set -u",
        *[f"export {key}={value}" for key, value in NCCL_ENV.items()],
        f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={out}/debug/nccl/rank_",
        f"mkdir -p {out}/debug/nccl",
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "STARTED=$(mktemp)  # OUT/preempted.json newer than this: the ranks stopped on a signal this time",
        "",
        f"srun {'--no-kill ' if elastic else ''}--kill-on-bad-exit={0 if elastic else 1} \\",
        f"  {_quote(train)} \\",
        f'  --rdzv-endpoint "$HEAD:{RDZV_PORT}" --rdzv-id "$SLURM_JOB_ID"',
        "code=$?",
        f'if [ $code -eq 75 ] || [ {out}/preempted.json -nt "$STARTED" ]; then  # saved after a signal: run on',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        'rm -f "$STARTED"',
        "exit $code",
        "",
    ]
    return "\n".join(lines)
