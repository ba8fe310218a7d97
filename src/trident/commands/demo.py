"""`trident demo [--out DIR]`: the whole flow end to end on an embedded default corpus."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/demo", help="output folder (report.md, loss.png, checkpoints)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: configs/demo.yaml)")
    parser.add_argument("--max-docs", type=int, default=None, help="limit the corpus (for quick runs)")
    parser.add_argument("overrides", nargs="*", help="config overrides for the training stage (key=value)")
    parser.add_argument("--overwrite", action="store_true",
                        help="run in a non-empty --out (an earlier demo's outputs there are removed first)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from trident.data.output_folder import OutputFolderError, record_outputs, start_outputs
    from trident.demo.embedded import run_demo

    try:
        before = start_outputs(args.out, "demo", args.overwrite)
        summary = run_demo(Path(args.out), steps=args.steps, max_docs=args.max_docs, overrides=args.overrides)
    except OutputFolderError as err:  # e.g. --overwrite on a folder whose curated/ trident did not write
        print(f"trident demo: error: {err}", file=sys.stderr)
        return 2
    record_outputs(args.out, "demo", before)
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "metrics"}))
    return 0
