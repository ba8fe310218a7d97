"""`trident eval CKPT`: zero/one/few-shot evaluation on the MT-NLG task suite (+ bias probes).

`trident eval CKPT [parallel.tp=T parallel.pp=P ...] --nproc N` evaluates across N local ranks
(torchrun underneath; `torchrun ... -m trident eval CKPT ...` works too): see
trident.evaluate.parallel_lm."""
from __future__ import annotations

import argparse
import json
import os
import sys

from trident.text.storage import location


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trident.tasks import ALIASES, TASK_NAMES

    parser.add_argument("checkpoint", nargs="?", metavar="CKPT",
                        help="trident checkpoint directory (a run's checkpoints/ root or one step_N folder)")
    parser.add_argument("overrides", nargs="*", metavar="parallel.KEY=VALUE",
                        help="layout to evaluate CKPT in across ranks: parallel.tp, parallel.pp, parallel.dp, "
                             "parallel.sequence_parallel, parallel.layer_partition (any saved layout loads)")
    parser.add_argument("--nproc", type=int, default=1, metavar="N",
                        help="local ranks to start (torchrun underneath); dp = N / (tp x pp)")
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
    parser.add_argument("--fewshot-construction", choices=("harness", "per-document"), default="harness",
                        help="harness: lm-evaluation-harness's sampler and delimiters, so scores compare with "
                             "published harness numbers (default); per-document: each document's examples "
                             "seeded on their own (prompts independent of --limit)")
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
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier DIR/results.json and DIR/samples/")
    parser.add_argument("--json", action="store_true", help="print results.json to stdout instead of the table")


def run(args) -> int:
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_hf, load_trident
    from trident.tasks import TaskDataError

    if args.hf and args.checkpoint and "=" in args.checkpoint:  # `--hf DIR parallel.tp=2`: no CKPT was meant
        args.overrides, args.checkpoint = [args.checkpoint, *args.overrides], None
    if (args.checkpoint is None) == (args.hf is None):
        print("trident eval: give exactly one of CKPT or --hf MODEL_DIR", file=sys.stderr)
        return 2
    earlier = [name for name in ("results.json", "samples") if args.out and (location(args.out) / name).exists()]
    if earlier and not args.overwrite:  # an earlier evaluation's results are never silently replaced
        print(f"trident eval: {args.out} already holds {' and '.join(earlier)} of an earlier evaluation; "
              f"choose another --out, or pass --overwrite", file=sys.stderr)
        return 2
    if args.checkpoint is not None and (args.nproc > 1 or args.overrides or _world_size() > 1):
        return _run_parallel(args)
    if args.overrides or args.nproc > 1:
        print("trident eval: parallel.* overrides and --nproc apply to a trident CKPT, not --hf", file=sys.stderr)
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
                                 contamination_ngram=args.contamination_ngram,
                                 fewshot_construction=args.fewshot_construction)
    except (TaskDataError, KeyError, FileNotFoundError, ImportError, ValueError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"trident eval: {message}", file=sys.stderr)
        return 1
    _report(args, results)
    return 0


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def forwarded_argv(args) -> list[str]:
    """The `trident eval ...` arguments each torchrun rank gets: these args without --nproc."""
    argv = ["eval", args.checkpoint, *args.overrides, "--tasks", args.tasks,
            "--shots", ",".join(map(str, args.shots)), "--batch-size", str(args.batch_size), "--seed", str(args.seed),
            "--contamination-ngram", str(args.contamination_ngram), "--device", args.device, "--dtype", args.dtype]
    for flag, value in (("--data-dir", args.data_dir), ("--out", args.out), ("--limit", args.limit),
                        ("--tokenizer", args.tokenizer)):
        if value is not None:
            argv += [flag, str(value)]
    argv += [flag for flag, on in (("--log-samples", args.log_samples), ("--bias", args.bias),
                                   ("--overwrite", args.overwrite), ("--json", args.json)) if on]
    if args.contamination_corpus:  # nargs="+": last, so it swallows nothing else
        argv += ["--contamination-corpus", *args.contamination_corpus]
    return argv


def _run_parallel(args) -> int:
    """Check the layout, start the ranks (unless torchrun already did), evaluate in lock step."""
    from trident.config import ConfigError
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.parallel_lm import checkpoint_layout, load_parallel
    from trident.tasks import TaskDataError
    from trident.train.launch import (init_distributed, relaunch_with_torchrun, shutdown_distributed,
                                      torchrun_command, under_torchrun)

    world = _world_size() if under_torchrun() else args.nproc
    try:  # a layout that does not fit the model fails here, before any rank starts
        checkpoint_layout(args.checkpoint, args.overrides, world)
    except (ConfigError, FileNotFoundError) as error:
        print(f"trident eval: {error}", file=sys.stderr)
        return 2
    if args.nproc > 1 and not under_torchrun():
        return relaunch_with_torchrun(torchrun_command(args.nproc, forwarded_argv(args)))[0]
    init_distributed("gloo" if args.device == "cpu" else "nccl")
    rank = int(os.environ.get("RANK", "0"))
    try:
        lm = load_parallel(args.checkpoint, args.overrides, batch_size=args.batch_size, device=args.device,
                           tokenizer_path=args.tokenizer, dtype=args.dtype)
        results = run_evaluation(lm, args.tasks.split(","), args.shots, args.data_dir,
                                 args.out if rank == 0 else None, seed=args.seed, batch_size=args.batch_size,
                                 limit=args.limit, log_samples=args.log_samples, bias=args.bias,
                                 progress=rank == 0 and not args.json and sys.stderr.isatty(),
                                 contamination_corpus=args.contamination_corpus,
                                 contamination_ngram=args.contamination_ngram,
                                 fewshot_construction=args.fewshot_construction)
    except (TaskDataError, KeyError, FileNotFoundError, ValueError) as err:
        # every rank reads the same files and requests, so every rank fails alike: rank 0 reports
        if rank == 0:
            print(f"trident eval: {err.args[0] if isinstance(err, KeyError) and err.args else err}", file=sys.stderr)
        shutdown_distributed()
        return 1
    # anything else propagates without a barrier: the rank exits and torchrun stops the others
    shutdown_distributed()
    if rank == 0:
        _report(args, results)
    return 0


def _report(args, results: dict) -> None:
    from trident.evaluate.results import print_table

    if args.json:
        from trident.evaluate.results import _strict

        print(json.dumps(_strict(results), indent=2))
    else:
        print_table(results)
        if args.out:
            print(f"wrote {args.out}/results.json")
