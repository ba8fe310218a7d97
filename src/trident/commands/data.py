"""`trident data which RUN --step N | --doc ID [--json]`: a run's data, traced to its documents."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    which = sub.add_parser("which", help="the documents of a step's batch, or the steps that read a document")
    which.add_argument("run", help="the run's output folder (config.yaml, metrics.jsonl)")
    what = which.add_mutually_exclusive_group(required=True)
    what.add_argument("--step", type=int, help="list every sample of this step with its documents and sources")
    what.add_argument("--doc", help="FILE:LINE (a source line) or PREFIX:INDEX (a document of PREFIX.bin)")
    which.add_argument("--json", action="store_true", help="print the answer as JSON")


def run(args) -> int:
    from trident.config import ConfigError
    from trident.train.which import which_doc, which_step

    try:
        answer = which_step(args.run, args.step) if args.step is not None else which_doc(args.run, args.doc)
    except (ConfigError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(answer, indent=1) if args.json else _text(answer))
    return 0


def _text(answer: dict) -> str:
    if "documents" in answer:
        first, count = answer["samples"]
        lines = [f"step {answer['step']}: samples {first}-{first + count - 1}"]
        for d in answer["documents"]:
            source = f" ({d['source']})" if d["source"] else ""
            lines.append(f"  sample {d['sample']}: {d['prefix']} document {d['document']} "
                         f"tokens {d['tokens'][0]}-{d['tokens'][1]}{source}")
        return "\n".join(lines)
    steps = answer["steps"]
    head = f"{answer['document']} ({answer['prefix']} document {answer['index']}): read by {len(steps)} step(s)"
    return "\n".join([head] + [f"  step {s['step']}: samples {', '.join(map(str, s['samples']))}" for s in steps])
