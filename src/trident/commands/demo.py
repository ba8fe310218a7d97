"""`trident demo [--out DIR]`: the packaged flow file demo/demo.flow.yaml, run by `trident run`'s code."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEMO_FLOW = Path(__file__).resolve().parents[1] / "demo" / "demo.flow.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/demo", help="output folder (report.md, loss.png, checkpoints)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: configs/demo.yaml)")
    parser.add_argument("--max-docs", type=int, default=None, help="limit the corpus (for quick runs)")
    parser.add_argument("overrides", nargs="*", help="config overrides for the training stage (key=value)")
    parser.add_argument("--overwrite", action="store_true",
                        help="run in a non-empty --out (an earlier demo's outputs there are removed first)")
    parser.add_argument("--json", action="store_true", help="print the stage keys and the stages that ran as JSON")


def demo_flow(steps: int | None, max_docs: int | None, overrides: list[str]) -> dict:
    """The packaged flow with the command line's changes applied."""
    import yaml

    raw = yaml.safe_load(DEMO_FLOW.read_text())
    if max_docs:  # the docstring corpus is the source big enough to limit
        for source in raw["sources"]:
            if source["generate"]["kind"] == "stdlib-docstrings":
                source["generate"]["max_docs"] = max_docs
    raw["train"]["overrides"] = [*([f"train.steps={steps}"] if steps else []), *overrides]
    return raw


def run(args) -> int:
    from trident.config import ConfigError
    from trident.curate.document import CurateError
    from trident.data.output_folder import OutputFolderError
    from trident.data.run_folder import RunFolder
    from trident.flow.run import run_flow
    from trident.commands.run import FLOW_FOLDER
    from trident.flow.spec import FlowError
    from trident.text.storage import UnsupportedLocation, require_local

    try:
        require_local(args.out, "--out", FLOW_FOLDER)
        with RunFolder(args.out, "demo") as folder:  # a second demo or flow into OUT meanwhile exits 2
            folder.start_outputs(args.overwrite)
            summary = run_flow(DEMO_FLOW, folder.path, demo_flow(args.steps, args.max_docs, args.overrides))
            folder.record_outputs()
    except (OutputFolderError, UnsupportedLocation) as err:  # e.g. --overwrite on a folder whose curated/ trident did not write
        print(f"trident demo: error: {err}", file=sys.stderr)
        return 2
    except (FlowError, CurateError) as err:
        print(f"trident demo: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, ConfigError) else 1  # a config mistake fails at start, as trident run
    if args.json:
        print(json.dumps(summary))
    return 0
