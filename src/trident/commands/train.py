"""`trident train CONFIG [key=value ...] [--nproc N] [--out DIR]`."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file or preset name (tiny, demo, gpt-125m, gpt-1.3b, mtnlg-530b)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, values parsed as YAML")
    parser.add_argument("--nproc", type=int, default=1, help="local processes to start (torchrun underneath)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="with --nproc: restart all ranks after a failure (use checkpoint.load=auto to resume)")
    parser.add_argument("--out", default="runs/train", help="output folder (config.yaml, metrics.jsonl, checkpoints/)")
    parser.add_argument("--json", action="store_true", help="print the final step's metrics as JSON")


def run(args) -> int:
    from trident.config import ConfigError, load_config
    from trident.train.launch import init_distributed, relaunch_with_torchrun, shutdown_distributed, under_torchrun

    try:
        config = load_config(args.config, args.overrides)
        config.validate(args.nproc if not under_torchrun() else None)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.nproc > 1 and not under_torchrun():
        forwarded = ["train", args.config, *args.overrides, "--out", args.out] + (["--json"] if args.json else [])
        return relaunch_with_torchrun(args.nproc, forwarded, args.max_restarts)
    from trident.parallel.tensor import TokenOutOfRange
    from trident.train.trainer import RankFailure, Trainer

    init_distributed(config.parallel.backend, config.parallel.timeout_s)
    try:
        trainer = Trainer(config, args.out)
        records = trainer.train()
    except (ConfigError, TokenOutOfRange) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RankFailure as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    else:
        shutdown_distributed()
    if args.json and trainer.mesh.rank == 0 and records:
        print(json.dumps(records[-1]))
    return 0
