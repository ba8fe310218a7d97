"""`trident run FLOW.yaml [--out DIR]`: raw text to an evaluated model in one resumable command."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trident.flow.spec import KEYS

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("flow file keys (src/trident/demo/demo.flow.yaml is a complete example):\n"
                     + "\n".join(f"  {section}: {', '.join(keys)}" for section, keys in KEYS.items()))
    parser.add_argument("flow", help="flow file: sources (paths/globs, weights), curate, tokenizer, train, eval")
    parser.add_argument("--out", default="runs/flow",
                        help="output folder; a rerun skips every stage whose settings and inputs are unchanged")
    parser.add_argument("--json", action="store_true", help="print the stage keys and the stages that ran as JSON")


def run(args) -> int:
    from trident.curate.document import CurateError
    from trident.data.output_folder import OutputFolderError
    from trident.flow.run import run_flow
    from trident.flow.spec import FlowError, FlowKeyError

    try:
        summary = run_flow(args.flow, args.out)
    except (FlowError, CurateError, OutputFolderError) as error:
        print(f"trident run: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, FlowKeyError) else 1
    if args.json:
        print(json.dumps(summary))
    return 0
