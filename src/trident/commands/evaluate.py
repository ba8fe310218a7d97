"""`trident eval CKPT`: zero/one/few-shot evaluation on the MT-NLG task suite (+ bias probes)."""
from __future__ import annotations

import argparse
import json
import sys


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trident.evaluate.tasks import ALIASES, TASK_NAMES

    parser.add_argument("checkpoint", nargs="?", metavar="CKPT",
                        help="trident checkpoint directory (a run's checkpoints/ root or one step_N folder)")
    parser.add_argument("--hf", metavar="MODEL_DIR",
                        help="evaluate a local Hugging Face causal LM directory instead of CKPT")
    parser.add_argument("--tasks", required=True,
                        help=f"comma-separated: {','.join(TASK_NAMES)} (aliases: {','.join(ALIASES)})")
    parser.add_argument("--shots", type=_int_list, default=[0], help="comma-separated shot counts (default: 0)")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="folder with each task's published files (see docs/evaluation.md); "
                             "omitted: the Hugging Face hub via `datasets` (needs network)")
    parser.add_argument("--out", metavar="DIR", help="write DIR/results.json (and DIR/samples/ with --log-samples)")
    parser.add_argument("--batch-size", type=int, default=8, metavar="N", help="rows per forward pass (default 8)")
    parser.add_argument("--limit", type=int, metavar="N", help="score only the first N examples of each task")
    parser.add_argument("--seed", type=int, default=1234, help="few-shot sampling seed (default 1234)")
    parser.add_argument("--log-samples", action="store_true", help="write per-example JSONL under OUT/samples/")
    parser.add_argument("--bias", action="store_true", help="also run the bias probes (results under 'bias')")
    parser.add_argument("--contamination-corpus", nargs="+", metavar="FILE",
                        help="training JSONL files: report per task the share of examples sharing a 13-gram "
                             "with them and the scores on the clean rest")
    parser.add_argument("--contamination-ngram", type=int, default=13, metavar="N",
                        help="n-gram length for --contamination-corpus (default 13, as GPT-3 / MT-NLG)")
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer.json when the checkpoint has none")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="weights' precision for the forward pass (log-softmax is fp32 either way)")
    parser.add_argument("--json", action="store_true", help="print results.json to stdout instead of the table")


def run(args) -> int:
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_hf, load_trident
    from trident.evaluate.results import print_table
    from trident.evaluate.tasks import TaskDataError

    if (args.checkpoint is None) == (args.hf is None):
        print("trident eval: give exactly one of CKPT or --hf MODEL_DIR", file=sys.stderr)
        return 2
    try:
        if args.hf:
            lm = load_hf(args.hf, batch_size=args.batch_size, device=args.device, dtype=args.dtype)
        else:
            lm = load_trident(args.checkpoint, batch_size=args.batch_size, device=args.device,
                              tokenizer_path=args.tokenizer, dtype=args.dtype)
        results = run_evaluation(lm, args.tasks.split(","), args.shots, args.data_dir, args.out, seed=args.seed,
                                 batch_size=args.batch_size, limit=args.limit, log_samples=args.log_samples,
                                 bias=args.bias, progress=not args.json and sys.stderr.isatty(),
                                 contamination_corpus=args.contamination_corpus,
                                 contamination_ngram=args.contamination_ngram)
    except (TaskDataError, KeyError, FileNotFoundError, ImportError, ValueError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"trident eval: {message}", file=sys.stderr)
        return 1
    if args.json:
        from trident.evaluate.results import _strict

        print(json.dumps(_strict(results), indent=2))
    else:
        print_table(results)
        if args.out:
            print(f"wrote {args.out}/results.json")
    return 0
