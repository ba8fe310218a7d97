"""`trident launch CONFIG [key=value ...] --nodes N --gpus-per-node G [--partition P] [--time T] [--dry-run]`."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file or preset name (e.g. mtnlg-530b)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, passed on to `trident train`")
    parser.add_argument("--nodes", type=int, required=True, help="nodes to ask Slurm for")
    parser.add_argument("--min-nodes", type=int, default=0,
                        help="elastic: go on with as few as this many nodes after a node is lost (default: all)")
    parser.add_argument("--gpus-per-node", type=int, required=True, help="GPUs (ranks) per node")
    parser.add_argument("--gpu", default="a100-80gb", help="hardware profile the plan uses (see `trident plan`)")
    parser.add_argument("--partition", default="", help="Slurm partition")
    parser.add_argument("--time", default="", help="Slurm time limit, e.g. 2-00:00:00")
    parser.add_argument("--max-restarts", type=int, default=3, help="torchrun restarts after a rank fails")
    parser.add_argument("--write-gbs", type=float, default=2.0,
                        help="checkpoint write bandwidth of one node in GB/s (sets the USR1 lead time)")
    parser.add_argument("--out", default="runs/train", help="the run's output folder (shared by every node)")
    parser.add_argument("--dry-run", action="store_true", help="print the script instead of writing it")


def run(args) -> int:
    from trident.config import ConfigError, load_config
    from trident.hardware import load_hardware
    from trident.launch.slurm import SCRIPT_MARK, Job, sbatch_script
    from trident.plan.memory import Layout
    from trident.plan.search import evaluate
    from trident.text.storage import require_local

    try:
        require_local(args.out, "--out", "Slurm writes its logs and the script's NCCL dumps to OUT on the nodes' "
                                         "shared disk, and sbatch reads OUT/launch.sbatch from it")
        config = load_config(args.config, args.overrides)
        hardware = load_hardware(args.gpu)
        problems = _problems(config, args)
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if problems:
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 2
    gpus = args.nodes * args.gpus_per_node
    # the trainer keeps fp32 gradient buffers and uses SDPA attention: plan what it will do
    plan = evaluate(config, Layout.from_config(config, gpus, "fp32"), hardware, gpus, args.gpus_per_node,
                    flash_attention=True)
    if not plan.ok:
        print(f"error: {plan.layout.label()} on {gpus} x {hardware.name}: {'; '.join(plan.reasons)} "
              f"(`trident plan {args.config} --gpus {gpus} --gpu {args.gpu} --rank` lists layouts that fit)",
              file=sys.stderr)
        return 2
    job = Job(config_arg=args.config, overrides=list(args.overrides), out=args.out, nodes=args.nodes,
              gpus_per_node=args.gpus_per_node, min_nodes=args.min_nodes, partition=args.partition,
              time=args.time, max_restarts=args.max_restarts, write_gbs=args.write_gbs)
    script = sbatch_script(job, config, plan)
    if args.dry_run:
        print(script, end="")
        return 0
    path = Path(args.out) / "launch.sbatch"
    if path.exists() and SCRIPT_MARK not in path.read_text(errors="replace")[:400]:
        print(f"error: {path} exists and was not written by `trident launch`; choose another --out",
              file=sys.stderr)  # never overwrite what trident did not write
        return 2
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    os.chmod(path, 0o755)
    print(f"wrote {path}; submit it with: sbatch {path}")
    return 0


def _problems(config, args) -> list[str]:
    """Launch mistakes the script would only meet on the cluster."""
    problems = []
    if args.nodes < 1 or args.gpus_per_node < 1:
        problems.append("--nodes and --gpus-per-node must be >= 1")
    if not 0 <= args.min_nodes <= args.nodes:
        problems.append(f"--min-nodes {args.min_nodes} must lie in [0, --nodes {args.nodes}]")
    if args.gpus_per_node % config.parallel.tp and not config.parallel.allow_tp_across_hosts:
        problems.append(f"parallel.tp={config.parallel.tp} does not divide --gpus-per-node {args.gpus_per_node}: "
                        f"tensor-parallel groups would span nodes (set parallel.allow_tp_across_hosts=true if meant)")
    if config.model.vocab_size <= 0:
        problems.append("model.vocab_size is 0 (filled from the tokenizer at train time); the plan needs it: "
                        "add model.vocab_size=50257 (or your tokenizer's size)")
    return problems
