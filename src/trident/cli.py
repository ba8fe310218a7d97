"""The `trident` command: one thin subcommand per stage; the logic lives in trident.commands.*."""
from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import os
import sys

# name -> (module under trident.commands, one-line help). Modules are imported lazily so that
# `trident --help` and light commands never pay for torch or Ray start-up.
COMMANDS = {
    "demo": ("demo", "run the packaged demo flow end to end on text every Python installation ships"),
    "run": ("run", "raw text to an evaluated model from a flow file (resumable: unchanged stages are skipped)"),
    "train": ("train", "train a GPT from a config (--nproc N for local multi-process)"),
    "tokenizer": ("tokenizer", "train a byte-level BPE tokenizer"),
    "data": ("data", "trace a run's data: the documents of a step, the steps that read a document"),
    "tokenize": ("tokenize", "JSONL -> Megatron indexed dataset (PREFIX.bin/.idx)"),
    "generate": ("generate", "sample text from a checkpoint (--nproc N on any TP x PP layout)"),
    "serve": ("serve", "serve a checkpoint over the OpenAI completions and chat APIs (continuous batching, any layout)"),
    "curate": ("curate", "curation pipeline: WARC/HTML/JSONL -> clean deduplicated shards"),
    "eval": ("evaluate", "zero/one/few-shot evaluation of a checkpoint"),
    "lm-eval": ("lm_eval", "EleutherAI lm-evaluation-harness with trident checkpoints (--model trident)"),
    "launch": ("launch", "write a Slurm batch script for a multi-node run (preemption, requeue, elastic restart)"),
    "diagnose": ("diagnose", "name the rank that stopped a run first and where, from its flight-recorder dumps"),
    "replay": ("replay", "re-run one step of a run from the checkpoint before it, on any layout"),
    "plan": ("plan", "predict memory and step time of parallel layouts"),
    "rehearse": ("rehearse", "run chosen ranks of a real layout on one CPU (fake process group and tensors)"),
    "pipeline-diagram": ("pipeline_diagram", "draw a pipeline schedule as a PNG timeline"),
    "export-hf": ("export_hf", "export a checkpoint as a Hugging Face GPT-2 or Llama model"),
    "import-hf": ("import_hf", "import a Hugging Face GPT-2 or Llama model as a trident checkpoint"),
}


def _available() -> dict[str, tuple[str, str]]:
    found = {}
    for name, (module, help_text) in COMMANDS.items():
        if importlib.util.find_spec(f"trident.commands.{module}") is not None:
            found[name] = (module, help_text)
    return found


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    import trident

    parser = argparse.ArgumentParser(prog="trident", description=__doc__)
    parser.add_argument("--version", action="version", version=f"trident {trident.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in _available().items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            importlib.import_module(f"trident.commands.{module}").add_arguments(command_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    available = _available()
    parser = build_parser(only=command if command in available else None)
    if not argv:
        parser.print_help()
        return 0
    if command not in available:
        _refuse_command(parser, argv, command, available)
    # options before the command are trident's own: --help and --version exit here, any other exits 2
    parser.parse_args(argv[:argv.index(command)])
    module = importlib.import_module(f"trident.commands.{available[command][0]}")
    # Parse the subcommand on its own so `key=value` overrides may come before or after options.
    sub = argparse.ArgumentParser(prog=f"trident {command}", description=available[command][1])
    module.add_arguments(sub)
    rest = argv[argv.index(command) + 1:]
    try:
        args = sub.parse_intermixed_args(rest)
    except TypeError:  # commands with nested subcommands (curate, tokenizer) cannot intermix
        args = sub.parse_args(rest)
    args.command = command
    from trident.text.storage import UnsupportedLocation
    from trident.text.store_errors import check_buckets, from_a_store, store_error, urls_in

    urls = urls_in(vars(args).values())
    try:
        check_buckets(urls)  # a missing bucket, refused credentials, an unreachable store: before any work
        return int(module.run(args) or 0)
    except UnsupportedLocation as error:  # a URL where only a local path works, met below a command's own checks
        print(f"trident {command}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # an object store's failure no command reported itself: one line, its exit code
        found = store_error(error, " or ".join(urls) or "an object store", f"trident {command}") \
            if from_a_store(error) else None
        if found is None:
            raise
        print(f"trident {command}: error: {found}", file=sys.stderr)
        return found.code


def entry() -> None:
    """The `trident` program (console script and `python -m trident`): main, then exit with its code."""
    code = main()
    # the interpreter's last collections walk every object left: torch's ~0.64 s of exit falls to ~0.2 s,
    # numpy's ~20 ms to ~0 (files are closed by then; only cyclic garbage, freed by the OS, is skipped)
    gc.freeze()
    sys.exit(code)


def _refuse_command(parser: argparse.ArgumentParser, argv: list[str], command: str | None, available: dict) -> None:
    """Exit 2 on a mistyped command, naming the nearest one; with options only, argparse acts on them
    (--help and --version exit 0, an unknown option exits 2)."""
    from trident.config.suggest import did_you_mean

    if command is not None:
        parser.error(f"unknown command {command!r}{did_you_mean(command, available)} "
                     f"(commands: {', '.join(available)})")
    parser.parse_args(argv)
    parser.error("no command given")


HELP_WIDTH = "100"  # argparse wraps help to $COLUMNS: fixed, so the page does not depend on the terminal
REFERENCE_HEADER = """# Command-line reference

Every `trident` command with all its options, as `trident COMMAND --help` prints them. This page is
generated (a test checks it is current):
`python -c "from trident.cli import reference_page; print(reference_page(), end='')" > docs/cli.md`.
The README's [command table](../README.md#the-command-line) has one line a command; configuration
keys are in [config.md](config.md), flow-file keys in [config.md](config.md#flow-file-keys).
`trident --version` prints the version; an option `trident` does not take, or a mistyped command, exits 2
(a mistyped command, preset, config key or value names the nearest known one).
"""


def _help(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's help, then its nested actions' (`trident data which`, `trident tokenizer train`)."""
    texts = [parser.format_help()]
    for action in parser._actions:  # noqa: SLF001 - argparse exposes subparsers only here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            texts += [text for sub in action.choices.values() for text in _help(sub)]
    return texts


def command_help(name: str) -> str:
    """`trident NAME --help`, with its nested actions' help after it."""
    module, description = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"trident {name}", description=description)
    importlib.import_module(f"trident.commands.{module}").add_arguments(parser)
    return "\n".join(_help(parser)).rstrip()


def reference_page() -> str:
    """docs/cli.md: every command's full options, as its `--help` prints them (tests/test_cli_reference.py)."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        index = " · ".join(f"[{name}](#trident-{name})" for name in COMMANDS)
        sections = [f"## trident {name}\n\n```text\n{command_help(name)}\n```\n" for name in COMMANDS]
    finally:
        os.environ.pop("COLUMNS") if previous is None else os.environ.__setitem__("COLUMNS", previous)
    return "\n".join([REFERENCE_HEADER, index + "\n", *sections])
