"""Preemption: a stop signal reaching the launcher or any one rank stops every rank at the same step
boundary with a complete checkpoint and exit 75; the resumed run continues bit-exactly; no child
outlives the launcher; a time-based save bounds what a hard kill loses."""
import json
import os
import signal

import pytest

from distributed import run_distributed
from train_fixtures import (kill_all, losses, processes_mentioning, start, tiny_corpus, train_command, wait_for_steps,
                          wait_until_gone)
from trident.checkpoint.reader import complete_checkpoints
from trident.train.preemption import EXIT_PREEMPTED, StopRequests

DP2 = ("parallel.dp=2",)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return tiny_corpus(tmp_path_factory.mktemp("preempt"))


def _six_steps(rank, world, command, out):
    from trident.config import load_config
    from trident.train.trainer import Trainer

    config = load_config("tiny", [a for a in command if "=" in a and not a.startswith("--")])  # the CLI's overrides
    return {r["step"]: r["loss"] for r in Trainer(config, out, log=lambda *a: None).train()}


@pytest.fixture(scope="module")
def uninterrupted(corpus):
    """Six steps at dp 2 without a stop (in-process ranks: the same code as the command's, faster to
    start): the losses a stopped-and-resumed run must reproduce."""
    command = train_command(corpus, corpus / "unused", *DP2, "train.steps=6")
    return run_distributed(_six_steps, 2, command, str(corpus / "uninterrupted"), timeout=100)[0]


@pytest.mark.timeout(240)
def test_signal_to_one_rank_stops_all_and_the_resume_is_exact(corpus, uninterrupted):
    out = corpus / "rank-signal"
    # a save every step in the background: the stop must wait for it, then save synchronously
    overrides = (*DP2, "train.steps=6", "checkpoint.async_save=true", "checkpoint.save_interval=1")
    proc = start(train_command(corpus, out, *overrides, nproc=2), TRIDENT_INJECT="rank=1,step=3,kind=sigterm")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, err
    assert "stopped by SIGTERM after step 3" in err and "checkpoint.load=auto" in err and "Traceback" not in err
    assert complete_checkpoints(out / "checkpoints")[-1].name == "step_0000003"
    assert json.loads((out / "preempted.json").read_text())["step"] == 3
    # the line's resume, on in-process ranks (the command's trainer, without two more interpreters' start-up)
    run_distributed(_six_steps, 2, train_command(corpus, out, *overrides, "checkpoint.load=auto"), str(out), timeout=100)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]  # resumed at step 4, not run again from the start
    assert losses(out) == uninterrupted  # bit-exact, steps 1-3 before the stop and 4-6 after


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])  # a terminal's Ctrl-C; a scheduler's preemption
def test_a_signal_to_the_launcher_saves_prints_one_line_and_leaves_no_process(corpus, sig):
    out = corpus / f"launcher-{sig.name}"
    proc = start(train_command(corpus, out, *DP2, "train.steps=1000", nproc=2),
                 TRIDENT_INJECT="rank=0,step=1,kind=slow:0.15")  # steps slow enough to stop early
    try:
        wait_for_steps(out, 2, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == EXIT_PREEMPTED, err
        assert "Traceback" not in err
        line = next(line for line in err.splitlines() if line.startswith(f"stopped by {sig.name}"))
        step = int(line.split("after step ")[1].split(":")[0])
        assert "--nproc 2" in line and line.endswith("checkpoint.load=auto")  # the launcher's own command
        assert complete_checkpoints(out / "checkpoints")[-1].name == f"step_{step:07d}"
        assert 2 <= step < 1000 and not processes_mentioning(str(out))
    finally:
        kill_all(str(out))


@pytest.mark.timeout(120)
def test_no_rank_outlives_a_killed_launcher(corpus):
    out = corpus / "killed"
    proc = start(train_command(corpus, out, *DP2, "train.steps=1000", nproc=2),
                 TRIDENT_INJECT="rank=0,step=1,kind=slow:0.2")
    try:
        wait_for_steps(out, 1, proc)
        os.kill(proc.pid, signal.SIGKILL)  # no handler runs in the launcher
        assert wait_until_gone(str(out), timeout=60) == []
    finally:
        kill_all(str(out))


@pytest.mark.timeout(60)
def test_time_based_save_and_sigusr1_agreed_in_one_process(tmp_path):
    from train_fixtures import VOCAB, RandomTokens, tiny_config
    from trident.train.trainer import Trainer

    config = tiny_config("train.steps=3", "checkpoint.save_interval_minutes=1e-9", f"checkpoint.dir={tmp_path}",
                         "checkpoint.keep_last=0")
    Trainer(config, tmp_path, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None).train()
    assert [p.name for p in complete_checkpoints(tmp_path)] == [f"step_000000{i}" for i in (1, 2, 3)]
    os.environ["TRIDENT_INJECT"] = "rank=0,step=3,kind=sigterm"  # during the last step: the run just ends, saved
    try:
        last = Trainer(tiny_config("train.steps=3", f"checkpoint.dir={tmp_path}/last"), tmp_path / "last",
                       datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
        assert len(last.train()) == 3 and not (tmp_path / "last" / "preempted.json").exists()
    finally:
        del os.environ["TRIDENT_INJECT"]
    stops = StopRequests().install()
    try:
        assert stops.agree() == (None, False)
        os.kill(os.getpid(), signal.SIGUSR1)  # Slurm's warning ahead of the time limit
        assert stops.agree() == ("SIGUSR1", False)
    finally:
        stops.uninstall()
