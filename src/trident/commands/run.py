"""`trident run FLOW.yaml [--out DIR]`: raw text to an evaluated model in one resumable command."""
from __future__ import annotations

import argparse
import json
import sys


def flow_keys_help() -> str:
    """Every key a flow file accepts, by section, with its default as YAML writes it (from
    trident.config.flow's dataclasses, the same ones that check a flow file)."""
    import textwrap

    from trident.config.flow import FlowConfig
    from trident.config.typed import known_keys

    sections: dict[str, list[str]] = {}
    for key, default in known_keys(FlowConfig):
        section, _, rest = key.partition(".")
        shown = default if isinstance(default, str) else json.dumps(default)
        sections.setdefault(section, []).append(rest if default in ("", [], None) else f"{rest}={shown}")
    lines = [textwrap.fill(f"{section}: {', '.join(keys)}", 110, initial_indent="  ", subsequent_indent="      ")
             for section, keys in sections.items()]
    return ("flow file keys, with their defaults (src/trident/demo/demo.flow.yaml is a complete example;\n"
            "any other key is refused, exit 2):\n" + "\n".join(lines))


# why the flow's --out is local: its stages' own commands take URLs
FLOW_FOLDER = ("the flow engine keeps its stamps, stages and report in a local folder; run `trident curate`, "
               "`tokenize`, `train` and `eval` for outputs on a store")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = flow_keys_help()
    parser.add_argument("flow", help="flow file: sources (paths/globs, weights), curate, tokenizer, train, eval")
    parser.add_argument("--out", default="runs/flow",
                        help="output folder; a rerun skips every stage whose settings and inputs are unchanged")
    parser.add_argument("--json", action="store_true", help="print the stage keys and the stages that ran as JSON")


def run(args) -> int:
    """0 on success; 2 on a mistake in the flow file or a curation config it names; 75 when a signal (Ctrl-C,
    a scheduler's SIGTERM) stopped training after a checkpoint, as `trident train` (130 when it stopped
    before one); 1 on any other error."""
    from trident.config import ConfigError
    from trident.curate.document import CurateError
    from trident.data.output_folder import OutputFolderError
    from trident.data.run_folder import RunFolder
    from trident.flow.interrupted import FlowInterrupted
    from trident.flow.run import run_flow
    from trident.flow.spec import FlowError
    from trident.text.storage import UnsupportedLocation, require_local

    try:
        require_local(args.flow, "FLOW", "a flow file is read from a local path")
        require_local(args.out, "--out", FLOW_FOLDER)
        with RunFolder(args.out, "run"):  # a second flow into OUT meanwhile exits 2 (its stages skip by stamps)
            summary = run_flow(args.flow, args.out)
    except FlowInterrupted as stop:  # a stop on request, not a failure: where, and the command that goes on
        print(f"trident run: {stop}", file=sys.stderr)
        return stop.code
    except (FlowError, CurateError, OutputFolderError, UnsupportedLocation) as error:
        print(f"trident run: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, (ConfigError, OutputFolderError)) else 1  # a folder mistake: 2, everywhere
    if args.json:
        print(json.dumps(summary))
    return 0
