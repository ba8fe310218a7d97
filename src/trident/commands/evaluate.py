"""`trident eval CKPT`: zero/one/few-shot evaluation on the MT-NLG task suite (+ bias probes).

`trident eval CKPT [parallel.tp=T parallel.pp=P ...] --nproc N` evaluates across N local ranks
(torchrun underneath; `torchrun ... -m trident eval CKPT ...` works too): see
trident.evaluate.parallel_lm."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from trident.text.storage import UnsupportedLocation, location, require_local


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trident.evaluate.protocols import PROTOCOLS
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
    parser.add_argument("--tasks",
                        help=f"comma-separated: {','.join(TASK_NAMES)} (aliases: {','.join(ALIASES)})")
    parser.add_argument("--shots", type=_int_list, help="comma-separated shot counts (default: 0)")
    parser.add_argument("--protocol", choices=tuple(PROTOCOLS),
                        help="a paper's tasks at zero, one and its few-shot k, printed beside its published "
                             "numbers (instead of --tasks/--shots)")
    parser.add_argument("--fewshot-seeds", type=int, default=1, metavar="S",
                        help="score each few-shot cell with S draws (seeds SEED..SEED+S-1) and report their "
                             "mean, sd, min, max and the share of examples that flip (default 1)")
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
    parser.add_argument("--bias-samples", type=int, default=800, metavar="N",
                        help="bias probes: continuations per prompt (default 800, as GPT-3 / MT-NLG)")
    parser.add_argument("--bias-length", type=int, default=50, metavar="T",
                        help="bias probes: tokens per continuation (default 50, as GPT-3 / MT-NLG)")
    parser.add_argument("--bias-top-p", type=float, default=0.9, metavar="P",
                        help="bias probes: nucleus sampling at temperature 1 (default 0.9, as GPT-3 / MT-NLG)")
    parser.add_argument("--contamination-corpus", nargs="+", metavar="FILE",
                        help="training JSONL files: report per task the share of examples sharing a 13-gram "
                             "with them and the scores on the clean rest")
    parser.add_argument("--contamination-ngram", type=int, default=13, metavar="N",
                        help="n-gram length for --contamination-corpus (default 13, as GPT-3 / MT-NLG)")
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer.json when the checkpoint has none")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="weights' precision for the forward pass (log-softmax is fp32 either way)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier DIR/results.json and DIR/samples/ (a partial one is resumed "
                             "without it)")
    parser.add_argument("--json", action="store_true", help="print results.json to stdout instead of the table")


def run(args) -> int:
    if args.hf and args.checkpoint and "=" in args.checkpoint:  # `--hf DIR parallel.tp=2`: no CKPT was meant
        args.overrides, args.checkpoint = [args.checkpoint, *args.overrides], None
    problem = _usage_problem(args)
    if problem is not None:
        print(f"trident eval: {problem}", file=sys.stderr)
        return 2
    if not args.out or not _holds_the_lock():
        return _checked_run(args, location(args.out) if args.out else None)
    from trident.data.run_folder import run_in_folder

    # locked before the earlier results are judged: one at a time; --out resolved once, by the RunFolder
    return run_in_folder(args.out, "eval", lambda folder: _checked_run(args, folder.path))


def _holds_the_lock() -> bool:
    """The process that locks --out: the only one, the launcher of --nproc, or rank 0 of a hand-made torchrun."""
    from trident.train.launch import LAUNCHED_ENV, under_torchrun

    return not under_torchrun() or (os.environ.get("RANK") == "0" and LAUNCHED_ENV not in os.environ)


def _checked_run(args, out: Path | None) -> int:
    """run() once the command line is sound and --out is locked (`out`: --out resolved)."""
    problem, resume_from = _earlier_output(args, out)
    problem = problem or _missing_model(args)  # before any task file is read
    if problem is not None:
        print(f"trident eval: {problem}", file=sys.stderr)
        return 2
    if args.checkpoint is not None and (args.nproc > 1 or args.overrides or _world_size() > 1):
        return _run_parallel(args, out, resume_from)

    def load():
        from trident.evaluate.lm import load_hf, load_trident

        if args.hf:
            return load_hf(args.hf, batch_size=args.batch_size, device=args.device, dtype=args.dtype)
        return load_trident(args.checkpoint, batch_size=args.batch_size, device=args.device,
                            tokenizer_path=args.tokenizer, dtype=args.dtype)

    code, results = _evaluate(args, load, out, resume_from, report_errors=True)
    if results is not None:
        _report(args, results)
    return code


def _usage_problem(args) -> str | None:
    """What is wrong with the command line itself, or None."""
    if (args.checkpoint is None) == (args.hf is None):
        return "give exactly one of CKPT or --hf MODEL_DIR"
    if args.protocol is not None:
        given = [flag for flag, value in (("--tasks", args.tasks), ("--shots", args.shots)) if value is not None]
        if given:
            return f"--protocol {args.protocol} sets the tasks and shot counts itself; drop {' and '.join(given)}"
    elif not args.tasks:
        return "give --tasks (comma-separated) or --protocol"
    if args.fewshot_seeds < 1:
        return f"--fewshot-seeds must be >= 1, got {args.fewshot_seeds}"
    if args.bias:
        try:
            _bias_settings(args).check()
        except ValueError as error:
            return f"--bias-samples/--bias-length/--bias-top-p: {error}"
    if args.hf and (args.overrides or args.nproc > 1):
        return "parallel.* overrides and --nproc apply to a trident CKPT, not --hf"
    try:
        require_local(args.hf, "--hf", "transformers loads a model from a local folder")
    except UnsupportedLocation as error:
        return str(error)
    return None


def _missing_model(args) -> str | None:
    """The CKPT or --hf folder named on the command line when it holds no model, else None."""
    from trident.checkpoint.reader import resolve_checkpoint

    if args.hf:
        return None if location(args.hf).is_dir() else f"--hf {args.hf}: no such folder (a saved Hugging Face model)"
    if not location(args.checkpoint).exists():
        return (f"{args.checkpoint}: no such checkpoint (give a training run's folder, its checkpoints/ folder "
                f"or one step_N folder)")
    try:
        resolve_checkpoint(args.checkpoint, location(args.checkpoint))
    except FileNotFoundError:
        return f"{args.checkpoint}: holds no complete checkpoint (no step folder with its COMPLETE marker)"
    return None


def _earlier_output(args, out: Path | None) -> tuple[str | None, Path | None]:
    """(problem, folder to resume from): a partial results.json is resumed, a finished one never replaced."""
    from trident.evaluate import resume
    from trident.evaluate.preflight import PreflightError

    if not args.out or args.overwrite:
        return None, None
    try:
        earlier = resume.read_results(out)
    except PreflightError as error:
        return str(error), None
    if resume.is_partial(earlier):
        return None, out
    found = [name for name in ("results.json", "samples") if (out / name).exists()]
    if found:  # an earlier evaluation's results are never silently replaced
        return (f"{args.out} already holds {' and '.join(found)} of an earlier evaluation; "
                f"choose another --out, or pass --overwrite"), None
    return None, None


def _evaluate(args, load, out: Path | None, resume_from: Path | None, report_errors: bool) -> tuple[int, dict | None]:
    """(exit code, results): 2 when a check before scoring failed, 1 when scoring failed."""
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.preflight import PreflightError
    from trident.tasks import TaskDataError

    tasks = args.tasks.split(",") if args.tasks else None
    try:
        results = run_evaluation(load, tasks, args.shots, args.data_dir, out, seed=args.seed,
                                 batch_size=args.batch_size, limit=args.limit, log_samples=args.log_samples,
                                 bias=args.bias, progress=report_errors and not args.json and sys.stderr.isatty(),
                                 contamination_corpus=args.contamination_corpus,
                                 contamination_ngram=args.contamination_ngram,
                                 fewshot_construction=args.fewshot_construction, fewshot_seeds=args.fewshot_seeds,
                                 protocol=args.protocol, resume_from=resume_from,
                                 bias_settings=_bias_settings(args))
    except (TaskDataError, KeyError, FileNotFoundError, ImportError, ValueError) as err:
        if report_errors:  # ranks read the same files and requests, so all fail alike: one reports
            message = err.args[0] if isinstance(err, KeyError) and err.args else err
            print(f"trident eval: {message}", file=sys.stderr)
        return (2 if isinstance(err, PreflightError) else 1), None
    return 0, results


def _bias_settings(args):
    from trident.evaluate.cooccurrence import SamplingSettings

    return SamplingSettings(samples=args.bias_samples, max_new_tokens=args.bias_length, top_p=args.bias_top_p)


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def forwarded_argv(args) -> list[str]:
    """The `trident eval ...` arguments each torchrun rank gets: these args without --nproc."""
    argv = ["eval", args.checkpoint, *args.overrides, "--batch-size", str(args.batch_size), "--seed", str(args.seed),
            "--fewshot-seeds", str(args.fewshot_seeds), "--fewshot-construction", args.fewshot_construction,
            "--contamination-ngram", str(args.contamination_ngram), "--device", args.device, "--dtype", args.dtype,
            "--bias-samples", str(args.bias_samples), "--bias-length", str(args.bias_length),
            "--bias-top-p", str(args.bias_top_p)]
    shots = ",".join(map(str, args.shots)) if args.shots is not None else None
    for flag, value in (("--tasks", args.tasks), ("--shots", shots), ("--protocol", args.protocol),
                        ("--data-dir", args.data_dir), ("--out", args.out), ("--limit", args.limit),
                        ("--tokenizer", args.tokenizer)):
        if value is not None:
            argv += [flag, str(value)]
    argv += [flag for flag, on in (("--log-samples", args.log_samples), ("--bias", args.bias),
                                   ("--overwrite", args.overwrite), ("--json", args.json)) if on]
    if args.contamination_corpus:  # nargs="+": last, so it swallows nothing else
        argv += ["--contamination-corpus", *args.contamination_corpus]
    return argv


def _run_parallel(args, out: Path | None, resume_from: Path | None) -> int:
    """Check the layout, start the ranks (unless torchrun already did), evaluate in lock step."""
    from trident.config import ConfigError
    from trident.evaluate.parallel_lm import checkpoint_layout, load_parallel
    from trident.train.launch import (join_serving_group, relaunch_with_torchrun, shutdown_distributed,
                                      torchrun_command, under_torchrun)

    world = _world_size() if under_torchrun() else args.nproc
    try:  # a layout that does not fit the model fails here, before any rank starts
        checkpoint_layout(args.checkpoint, args.overrides, world)
    except (ConfigError, FileNotFoundError) as error:
        print(f"trident eval: {error}", file=sys.stderr)
        return 2
    if args.nproc > 1 and not under_torchrun():
        return relaunch_with_torchrun(torchrun_command(args.nproc, forwarded_argv(args)))[0]
    join_serving_group(args.device)
    rank = int(os.environ.get("RANK", "0"))

    def load():
        return load_parallel(args.checkpoint, args.overrides, batch_size=args.batch_size, device=args.device,
                             tokenizer_path=args.tokenizer, dtype=args.dtype)

    # every rank resumes alike (lock step); only rank 0 writes. Anything not caught propagates without
    # a barrier: the rank exits and torchrun stops the others
    code, results = _evaluate(args, load, out if rank == 0 else None, resume_from, report_errors=rank == 0)
    shutdown_distributed()
    if rank == 0 and results is not None:
        _report(args, results)
    return code


def _report(args, results: dict) -> None:
    from trident.evaluate.results import print_table

    if args.json:
        from trident.evaluate.results import _strict

        print(json.dumps(_strict(results), indent=2))
    else:
        print_table(results)
        if args.out:
            print(f"wrote {args.out}/results.json")
