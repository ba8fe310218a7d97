"""`trident train CONFIG [key=value ...] [--nproc N] [--out DIR]`."""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file or preset name (tiny, demo, gpt-125m, gpt-1.3b, mtnlg-530b)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, values parsed as YAML")
    parser.add_argument("--nproc", type=int, default=1, help="local processes to start (torchrun underneath)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="with --nproc: restart all ranks after a failure (use checkpoint.load=auto to resume)")
    parser.add_argument("--out", default="runs/train", help="output folder (config.yaml, metrics.jsonl, checkpoints/)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a non-empty --out that is not this run's resume (an earlier trident "
                             "run's outputs there are removed first)")
    parser.add_argument("--json", action="store_true", help="print the final step's metrics as JSON")


def run(args) -> int:
    from trident.config import ConfigError, load_config
    from trident.data.output_folder import OutputFolderError
    from trident.train.launch import init_distributed, relaunch_with_torchrun, shutdown_distributed, under_torchrun
    from trident.train.run_folder import RUN_ID_ENV, claim_train_folder, run_id

    try:
        config = load_config(args.config, args.overrides)
        config.validate(args.nproc if not under_torchrun() else None)
        # one process stamps the folder: the launcher, or rank 0 of a torchrun started by hand
        writer = not under_torchrun() or (os.environ.get("RANK") == "0" and RUN_ID_ENV not in os.environ)
        rid = run_id()
        claim_train_folder(config, args.out, args.overwrite, writer, rid)
    except (ConfigError, OutputFolderError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.nproc > 1 and not under_torchrun():
        forwarded = ["train", args.config, *args.overrides, "--out", args.out] + (["--json"] if args.json else [])
        os.environ[RUN_ID_ENV] = rid  # every rank and restart of this launch shares the folder's run id
        try:
            return relaunch_with_torchrun(args.nproc, forwarded, args.max_restarts)
        finally:
            del os.environ[RUN_ID_ENV]
    from trident.checkpoint.integrity import CheckpointError
    from trident.checkpoint.writer import SaveError
    from trident.parallel.token_ids import TokenOutOfRange
    from trident.train import allocator
    from trident.train.trainer import RankFailure, Trainer, TrainError

    if allocator.wanted(config.train.malloc_keep_freed, config.train.device):
        allocator.keep_freed_memory()  # first: set after the process group and model, it gains less (measured)
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
    except (TrainError, CheckpointError, SaveError, FileNotFoundError, TimeoutError) as error:
        # bad data, an unusable checkpoint, a failed save or validation: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    else:
        shutdown_distributed()
    if args.json and trainer.mesh.rank == 0 and records:
        print(json.dumps(records[-1]))
    return 0
