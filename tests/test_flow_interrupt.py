"""`trident run` stopped by Ctrl-C is an interrupt, not a failure: the terminal's SIGINT reaches the
flow and its training process together; training saves, the flow exits 75 as `trident train` does, and
report.md says where it stopped and which `trident run` command goes on from there (the stage's stamp
left unfinished, so that command resumes training and skips the finished stages)."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flow_fixtures import PIPELINE, TINY, write_site


def _flow(root: Path) -> Path:
    # 4 steps, each logged (metrics.jsonl tells the test when training started)
    train = [o for o in TINY if not o.startswith("train.steps")] + ["train.steps=4", "logging.log_interval=1"]
    flow = {"sources": [{"name": "docs", "paths": "site/*.html"}], "curate": {"config": PIPELINE},
            "tokenizer": {"vocab_size": 300}, "train": {"config": "tiny", "overrides": train}, "eval": "none",
            "sample": {"max_new_tokens": 4}}
    (root / "flow.yaml").write_text(yaml.safe_dump(flow))
    return root / "flow.yaml"


def _ctrl_c_after_step_one(command: list[str], root: Path, metrics: Path) -> subprocess.CompletedProcess:
    """Run `command` in a process group of its own, as a shell runs a foreground job, and send that
    group SIGINT (what Ctrl-C does) once training logged its first step."""
    # step 2 lasts long enough to stop in: each of its 4 micro-batches' forwards 0.5 s longer, 2 s in all (slow:1.5
    # made it 6 s, waited out after the stop)
    env = dict(os.environ, TRIDENT_INJECT="rank=0,step=2,kind=slow:0.5")
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 90
    while not (metrics.exists() and metrics.read_text().strip()) and proc.poll() is None:
        assert time.monotonic() < deadline, "training logged no step"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def test_ctrl_c_in_training_exits_75_and_reports_the_step_and_the_run_command_that_resumes(tmp_path):
    write_site(tmp_path, pages=12)
    flow, out = _flow(tmp_path), tmp_path / "out"
    command = [sys.executable, "-m", "trident", "run", str(flow), "--out", str(out)]
    stopped = _ctrl_c_after_step_one(command, tmp_path, out / "train" / "metrics.jsonl")
    resume = f"trident run {shlex.join([str(flow), '--out', str(out)])}"
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert "failed with exit status" not in stopped.stderr and "Traceback" not in stopped.stderr
    said = next(line for line in stopped.stderr.splitlines() if line.startswith("trident run: interrupted"))
    assert "at step 2 of its `train` stage (SIGINT" in said and said.endswith(f"resume with: {resume}"), said
    report = (out / "report.md").read_text()
    assert "**The flow was interrupted at step 2 of its `train` stage (SIGINT" in report, report
    assert f"Resume with `{resume}`" in report and "failed" not in report and "stopped at its" not in report
    # what the command it names goes on from (test_flow.py reruns such a stamp: train resumes, the rest skip)
    assert json.loads((out / "train" / "preempted.json").read_text())["step"] == 2
    assert (out / "train" / "checkpoints" / "step_0000002" / "COMPLETE").exists()
    assert not json.loads((out / ".flow" / "train.json").read_text())["done"]
    assert not (out / ".flow" / "report.json").exists()  # this report.md is not the report stage's


@pytest.mark.parametrize("stage", ["train", "eval"])
def test_a_stage_child_that_failed_after_a_signal_is_an_interrupt_not_a_failure(tmp_path, stage):
    """A child stage that exits non-zero because the signal stopped it before any checkpoint (a second
    Ctrl-C, an eval): 130 and the signal named; a child that failed by itself is still a failure."""
    from trident.flow.interrupted import FlowInterrupted, child_stage
    from trident.flow.spec import FlowError

    def stopped_by_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)  # caught by the flow, which lets the child act on it
        raise FlowError(f"`trident {stage}` failed with exit status 130")

    before = signal.getsignal(signal.SIGINT)  # Python's default, or a pytest-xdist worker's own
    with pytest.raises(FlowInterrupted) as caught:
        child_stage(stage, tmp_path if stage == "train" else None, "trident run f.yaml --out o", stopped_by_ctrl_c)
    assert caught.value.code == 130 and f"during its `{stage}` stage (SIGINT)" in str(caught.value)
    assert signal.getsignal(signal.SIGINT) is before  # the flow's own handling is back

    def failed():
        raise FlowError(f"`trident {stage}` failed with exit status 1")

    with pytest.raises(FlowError) as plain:
        child_stage(stage, tmp_path if stage == "train" else None, "trident run f.yaml --out o", failed)
    assert not isinstance(plain.value, FlowInterrupted)
