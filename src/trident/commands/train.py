"""`trident train CONFIG [key=value ...] [--nproc N] [--out DIR]`."""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file or preset name (tiny, demo, gpt-125m, gpt-1.3b, mtnlg-530b)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, values parsed as YAML")
    parser.add_argument("--nproc", type=int, default=1, help="local processes to start (torchrun underneath)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="with --nproc: restart all ranks after a failure (use checkpoint.load=auto to resume)")
    parser.add_argument("--nnodes", default="1",
                        help="nodes of the job: N, or MIN:MAX for an elastic job that goes on with fewer nodes after "
                             "one is lost (torchrun elastic, c10d rendezvous at --rdzv-endpoint)")
    parser.add_argument("--rdzv-endpoint", default="",
                        help="HOST:PORT where the nodes' agents meet (the first node); default: a free local port")
    parser.add_argument("--rdzv-conf", default="",
                        help="torchrun's rendezvous settings, e.g. keep_alive_interval=5,keep_alive_max_attempt=3 "
                             "(a lost node's place is given up after their product in seconds)")
    parser.add_argument("--rdzv-id", default="", help="the job's id, the same on every node (e.g. $SLURM_JOB_ID)")
    parser.add_argument("--out", default="runs/train", help="output folder (config.yaml, metrics.jsonl, checkpoints/)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a non-empty --out that is not this run's resume (an earlier trident "
                             "run's outputs there are removed first)")
    parser.add_argument("--json", action="store_true", help="print the final step's metrics as JSON")


def _launch(args, folder) -> int:
    """The launching process: torchrun with this command's arguments; a stop on a signal (OUT/preempted.json
    written by this launch's ranks) is printed as one line and exits EXIT_PREEMPTED; a rank's store failure
    (recorded in a local folder) as that rank's one line, with its kind's exit code."""
    import shutil
    import tempfile
    from pathlib import Path

    from trident.train.launch import first_failure, relaunch_with_torchrun, torchrun_command
    from trident.train.preemption import EXIT_MARKER, EXIT_PREEMPTED, read_marker, stop_message
    from trident.train.run_folder import RUN_ID_ENV

    forwarded = ["train", args.config, *args.overrides, "--out", args.out] + (["--json"] if args.json else [])
    command = torchrun_command(args.nproc, forwarded, args.max_restarts, args.nnodes, args.rdzv_endpoint,
                               args.rdzv_id, args.rdzv_conf)
    os.environ[RUN_ID_ENV] = folder.run_id  # every rank and restart of this launch shares the folder's run id
    # local, as OUT may be on a store that went away; not with restarts, whose next attempt may go on
    failures = Path(tempfile.mkdtemp(prefix="trident-failures-")) if not args.max_restarts else None
    try:
        code, started = relaunch_with_torchrun(command, failures)
        failed = first_failure(failures) if code and failures else None
    finally:
        del os.environ[RUN_ID_ENV]
        failures and shutil.rmtree(failures, ignore_errors=True)
    if failed is not None:  # a store failure: its one line, once, and its kind's code
        print(failed["line"], file=sys.stderr)
        return failed["code"]
    stopped = read_marker(folder.path, since=started)
    if stopped is not None:
        print(stop_message(stopped["signal"], stopped["step"], stopped["checkpoint"]), file=sys.stderr)
        return EXIT_PREEMPTED
    failed = read_marker(folder.path, since=started, name=EXIT_MARKER) if code else None
    return failed["code"] if failed else code


def run(args) -> int:
    from trident.config import ConfigError, load_config
    from trident.data.output_folder import OutputFolderError
    from trident.data.run_folder import RunFolder
    from trident.parallel.inject import ENV as INJECT_ENV, InjectError, parse
    from trident.text.store_errors import check_buckets, urls_in
    from trident.train.launch import under_torchrun
    from trident.train.loggers import check_logger_folder
    from trident.train.run_folder import RUN_ID_ENV, claim_train_folder, run_id

    launching = (args.nproc > 1 or args.nnodes != "1") and not under_torchrun()
    try:
        if args.nnodes != "1" and launching and not (args.rdzv_endpoint and args.rdzv_id):
            raise ConfigError(f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT (the first node) and --rdzv-id "
                              f"(the same on every node), or each node would start a job of its own")
        parse(os.environ.get(INJECT_ENV, ""))  # a malformed fault drill fails here, not at its step
        config = load_config(args.config, args.overrides)
        # the folder's resume key is the config as given: a resume's model, taken from its checkpoint
        # (the vocabulary set from the tokenizer), is still the same run
        as_given = copy.deepcopy(config)
        start_model = _adopt_model(args, config)
        # the buckets a config file names (trident.cli looked at the command line's): before any work
        check_buckets(urls_in([config.data.paths, config.data.tokenizer, config.checkpoint.dir,
                               config.checkpoint.load]))
        config.validate(args.nproc if not under_torchrun() and args.nnodes == "1" else None)
        # one process per node holds the lock and stamps the folder: the launcher, or rank 0 of a torchrun
        # started by hand; the nodes of one job share its run id, and so the lock
        writer = not under_torchrun() or (os.environ.get("RANK") == "0" and RUN_ID_ENV not in os.environ)
        rid = f"rdzv:{args.rdzv_id}" if launching and args.rdzv_id else run_id()  # the same on every node
        # --out resolved here, once; a lost lock ends the run at once (no checkpoint, no preempted.json), exit 2
        folder = RunFolder(args.out, "train", rid)
        check_logger_folder(config, str(folder))  # a URL --out with TensorBoard or W&B: refused before any rank
        # the lock first: a second run must not pass the folder check (or --overwrite it) while the first runs
        held = folder.hold() if writer else None
        try:
            claim_train_folder(as_given, folder, args.overwrite, writer)
        except OutputFolderError:
            held and held.release()
            raise
    except (ConfigError, OutputFolderError, InjectError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if start_model and config.checkpoint.load != "auto" and not under_torchrun():
        print(f"model: as stored in {start_model} (checkpoint.load)")
    if held and held.takeover_message():
        print(held.takeover_message(), file=sys.stderr)
    code = 1
    try:
        code = _launch(args, folder) if launching else _train(args, config, folder)
    finally:
        if held:
            held.release()
    return code


def _adopt_model(args, config):
    """The model of the checkpoint the run starts from replaces the config's (checkpoint/model_config.py);
    the checkpoint's path, or None when the run starts from none."""
    from trident.checkpoint.model_config import adopt_checkpoint_model
    from trident.config import given_model_keys

    root = config.checkpoint.dir or f"{args.out.rstrip('/')}/checkpoints"
    return adopt_checkpoint_model(config, given_model_keys(args.config, args.overrides), root)


def _leave_exit_marker(out: str, code: int, write_marker, name: str) -> None:
    """OUT/exit.json for the launcher; none when OUT is on a store that went away (the line said so)."""
    from trident.text.store_errors import store_failure_or

    try:
        write_marker(out, {"code": code, "rank": int(os.environ.get("RANK", "0"))}, name)
    except Exception as error:
        if not store_failure_or(error):
            raise


def _train(args, config, folder) -> int:
    """This process's rank (or the only process): train, and turn each way of ending into an exit code."""
    from trident.checkpoint.integrity import CheckpointError
    from trident.config import ConfigError
    from trident.checkpoint.writer import SaveError
    from trident.parallel.token_ids import TokenOutOfRange
    from trident.train import allocator
    from trident.train.launch import (LAUNCHED_ENV, init_distributed, leave_failure, shutdown_distributed,
                                      under_torchrun)
    from trident.train.diagnostics import CorruptionError
    from trident.train.preemption import (EXIT_MARKER, EXIT_PREEMPTED, Preempted, StopRequests, resume_command,
                                          write_marker)
    from trident.text.store_errors import StoreError
    from trident.train.trainer import RankFailure, Trainer, TrainError

    stops = StopRequests().install()  # from here a stop signal waits for the first step boundary
    if allocator.wanted(config.train.malloc_keep_freed, config.train.device):
        allocator.keep_freed_memory()  # first: set after the process group and model, it gains less (measured)
    # bad config or data 2, a dead or hung peer 3, silent corruption 4, anything else named 1 (one line each)
    # an object store's failure: its kind's code (StoreError.code, docs/bad-input.md#object-stores)
    codes = [((StoreError,), None), ((ConfigError, TokenOutOfRange), 2), ((RankFailure,), 3), ((CorruptionError,), 4),
             ((TrainError, CheckpointError, SaveError, FileNotFoundError, TimeoutError), 1)]
    try:
        init_distributed(config.parallel.backend, config.parallel.timeout_s, config.train.device)  # a GPU too few: 2
        trainer = Trainer(config, folder.path)
        records = trainer.train(stops)
    except tuple(kind for kinds, _ in codes for kind in kinds) as error:
        code = next(c for kinds, c in codes if isinstance(error, kinds)) or error.code
        # a store failure under the launcher: the launcher prints the line (its ranks' stderr stops here)
        if not (isinstance(error, StoreError) and leave_failure(f"error: {error}", code)):
            print(f"error: {error}", file=sys.stderr)
        if under_torchrun():  # torchrun exits 1 for any failed rank: the launcher takes the code from here
            _leave_exit_marker(args.out, code, write_marker, EXIT_MARKER)
        return code
    except Preempted as stopped:
        # under torchrun a preempted rank exits 0, so that torchrun neither restarts nor reports it:
        # the launcher (or a script reading OUT/preempted.json) turns the stop into EXIT_PREEMPTED
        if os.environ.get("RANK", "0") == "0" and LAUNCHED_ENV not in os.environ:
            print(stopped, file=sys.stderr)
        shutdown_distributed(wait=False)  # the stop's own barrier has passed
        return 0 if under_torchrun() else EXIT_PREEMPTED
    except KeyboardInterrupt:
        if os.environ.get("RANK", "0") == "0":
            print(f"interrupted without saving (a second Ctrl-C); resume from the last complete checkpoint with: "
                  f"{resume_command()}", file=sys.stderr)
        return 130
    else:
        shutdown_distributed()
    if args.json and trainer.mesh.rank == 0 and records:
        print(json.dumps(records[-1]))
    return 0
