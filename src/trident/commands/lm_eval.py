"""`trident lm-eval ARGS...`: EleutherAI lm-evaluation-harness's own command line, with trident's
checkpoints available as `--model trident --model_args checkpoint=PATH[,device=cpu,...]`."""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("harness_args", nargs=argparse.REMAINDER,
                        help="arguments for lm_eval, e.g. --model trident --model_args checkpoint=RUN/checkpoints "
                             "--tasks lambada_openai,piqa --num_fewshot 0")


def run(args) -> int:
    try:
        import trident.evaluate.lm_eval_model  # noqa: F401  (registers --model trident)
        from lm_eval.__main__ import cli_evaluate
    except ImportError as error:
        print(f"error: trident lm-eval needs lm-evaluation-harness: pip install 'trident-lm[lm-eval]' ({error})",
              file=sys.stderr)
        return 2
    sys.argv = ["lm_eval", *args.harness_args]
    cli_evaluate()
    return 0
