"""`trident replay RUN --step N [key=value ...] [--nproc N] [--json]`: re-run one step of a run."""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run's output folder (config.yaml, metrics.jsonl, checkpoints/)")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. a layout: parallel.dp=1 parallel.pp=1")
    parser.add_argument("--step", type=int, required=True, help="the step to re-run (as numbered in metrics.jsonl)")
    parser.add_argument("--nproc", type=int, default=1, help="local processes (torchrun underneath)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args) -> int:
    from trident.config import ConfigError
    from trident.train.launch import (init_distributed, relaunch_with_torchrun, shutdown_distributed,
                                      torchrun_command, under_torchrun)

    if args.nproc > 1 and not under_torchrun():
        forwarded = ["replay", args.run, *args.overrides, "--step", str(args.step)] + (["--json"] if args.json else [])
        return relaunch_with_torchrun(torchrun_command(args.nproc, forwarded))[0]
    from trident.checkpoint.integrity import CheckpointError
    from trident.train.replay import format_replay, replay

    init_distributed("auto")
    rank0 = os.environ.get("RANK", "0") == "0"
    try:
        result = replay(args.run, args.step, args.overrides, log=lambda *a: None)
    except (ConfigError, CheckpointError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, ConfigError) else 1
    shutdown_distributed()
    if rank0:
        print(json.dumps(result, indent=1) if args.json else format_replay(result))
    return 0
