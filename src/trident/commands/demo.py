"""`trident demo [--out DIR]`: the packaged flow file demo/demo.flow.yaml, run by `trident run`'s code."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEMO_FLOW = Path(__file__).resolve().parents[1] / "demo" / "demo.flow.yaml"
# the demo's evaluation tasks are cut from every 20th docstring (the flow's holdout_every): below 15 held-out
# documents the continuation task finds too few passages (it needs them from 2 documents of each split)
MIN_HELD_OUT = 15


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/demo", help="output folder (report.md, loss.png, checkpoints)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: configs/demo.yaml)")
    parser.add_argument("--max-docs", type=int, default=None,
                        help="limit the docstring corpus (for quick runs; at least 300: every 20th document is "
                             "held out for the evaluation tasks)")
    parser.add_argument("overrides", nargs="*", help="config overrides for the training stage (key=value)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start over in a non-empty --out (an earlier demo's outputs there are removed "
                             "first); without it, a rerun into an earlier demo's folder skips its finished stages")
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


def min_docs() -> int:
    """The smallest --max-docs whose held-out documents make the demo's evaluation tasks."""
    import yaml

    raw = yaml.safe_load(DEMO_FLOW.read_text())
    every = next(s["generate"]["holdout_every"] for s in raw["sources"] if s["generate"]["kind"] == "stdlib-docstrings")
    return MIN_HELD_OUT * every


def _claim(folder, overwrite: bool) -> tuple[list[str], set[str]] | None:
    """Start over (a new folder, or --overwrite), or go on in an earlier demo's folder as `trident run`
    does (its finished stages are skipped): then (the outputs it recorded, the entries there now)."""
    marker = folder.marker()
    if overwrite or not marker or marker.get("command") != "demo":
        folder.start_outputs(overwrite)  # refuses a non-empty folder that is not a demo's, exit 2
        return None
    folder.claim(False, same_run=lambda earlier: True)
    print(f"{folder.path} holds an earlier demo: its finished stages are skipped (--overwrite starts over)")
    return list(marker.get("outputs", [])), {p.name for p in folder.path.iterdir()}


def _record(folder, going_on: tuple[list[str], set[str]] | None) -> None:
    """The folder's marker lists every output of the demo: the earlier run's and this one's."""
    if going_on is None:
        folder.record_outputs()
        return
    earlier, before = going_on
    added = {p.name for p in folder.path.iterdir()} - before
    folder.stamp({"outputs": sorted(set(earlier) | added)})


def _resume_command(args) -> str:
    """This demo's command line (without --overwrite): rerun, it goes on where a stop left off."""
    import shlex

    given = [("--steps", args.steps), ("--max-docs", args.max_docs)]
    options = [str(part) for name, value in given if value is not None for part in (name, value)]
    return "trident demo " + shlex.join(["--out", args.out, *options, *args.overrides])


def run(args) -> int:
    from trident.config import ConfigError
    from trident.curate.document import CurateError
    from trident.data.output_folder import OutputFolderError
    from trident.data.run_folder import RunFolder
    from trident.flow.interrupted import FlowInterrupted
    from trident.flow.run import run_flow
    from trident.commands.run import FLOW_FOLDER
    from trident.flow.spec import FlowError
    from trident.text.storage import UnsupportedLocation, require_local

    if args.max_docs is not None and args.max_docs < min_docs():  # before any work, not after the corpus is built
        print(f"trident demo: error: --max-docs {args.max_docs}: the demo holds out every "
              f"{min_docs() // MIN_HELD_OUT}th document for its evaluation tasks and needs {MIN_HELD_OUT} of them; "
              f"give --max-docs {min_docs()} or more", file=sys.stderr)
        return 2
    try:
        require_local(args.out, "--out", FLOW_FOLDER)
        with RunFolder(args.out, "demo") as folder:  # a second demo or flow into OUT meanwhile exits 2
            going_on = _claim(folder, args.overwrite)
            summary = run_flow(DEMO_FLOW, folder.path, demo_flow(args.steps, args.max_docs, args.overrides),
                               resume=_resume_command(args))
            _record(folder, going_on)
    except (OutputFolderError, UnsupportedLocation) as err:  # e.g. --overwrite on a folder whose curated/ trident did not write
        print(f"trident demo: error: {err}", file=sys.stderr)
        return 2
    except FlowInterrupted as stop:  # Ctrl-C: as `trident run`, 75 once training saved
        print(f"trident demo: {stop}", file=sys.stderr)
        return stop.code
    except (FlowError, CurateError) as err:
        print(f"trident demo: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, ConfigError) else 1  # a config mistake fails at start, as trident run
    if args.json:
        print(json.dumps(summary))
    return 0
