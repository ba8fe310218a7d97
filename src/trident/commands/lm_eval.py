"""`trident lm-eval ARGS...`: EleutherAI lm-evaluation-harness's own command line, with trident's
checkpoints available as `--model trident --model_args checkpoint=PATH[,device=cpu,...]`.

Every argument goes to the harness untouched, whatever lm-eval 0.4.x is installed: releases with
subcommands (`lm-eval run|ls|validate`, lm_eval._cli) get `run` put in front unless one is named;
older ones take the arguments as they are. Both are entered through `lm_eval.__main__.cli_evaluate`.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys

SUBCOMMANDS = ("run", "ls", "validate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("harness_args", nargs=argparse.REMAINDER,
                        help="arguments for lm_eval, e.g. --model trident --model_args checkpoint=RUN/checkpoints "
                             "--tasks lambada_openai,piqa --num_fewshot 0")
    # no option of our own: `--model ...` (and -h) must reach the harness, not stop argparse here
    parser.prefix_chars = ""


def harness_argv(args: list[str], has_subcommands: bool) -> list[str]:
    """The harness's argv after its program name: `run` first when its CLI has subcommands and none is named."""
    if has_subcommands and args and args[0] not in SUBCOMMANDS and args[0] not in ("-h", "--help"):
        return ["run", *args]
    return list(args)


def run(args) -> int:
    try:
        import trident.evaluate.lm_eval_model  # noqa: F401  (registers --model trident)
        from lm_eval.__main__ import cli_evaluate
    except ImportError as error:
        print(f"error: trident lm-eval needs lm-evaluation-harness: pip install 'trident-lm[lm-eval]' ({error})",
              file=sys.stderr)
        return 2
    has_subcommands = importlib.util.find_spec("lm_eval._cli") is not None
    sys.argv = ["lm-eval", *harness_argv(args.harness_args, has_subcommands)]
    try:
        cli_evaluate()
    except SystemExit as stop:  # the harness's argparse errors and exits: pass its code on
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    return 0
