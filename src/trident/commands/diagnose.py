"""`trident diagnose OUT [--json]`: which rank stopped a run first, and where, from its flight dumps."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="the run's output folder (its debug/flight/ holds the ranks' dumps)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def run(args) -> int:
    from trident.diagnose.flight_report import diagnose, format_report
    from trident.text.storage import location

    folder = location(args.out) / "debug" / "flight"  # a run on a store keeps its dumps there
    try:
        verdict = diagnose(folder)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(verdict, indent=1) if args.json else format_report(verdict))
    return 0
