"""Shared helpers for tests that run `trident train` as a user would: a tiny tokenized corpus, the
command line, a process whose progress can be watched, and the processes a run left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def tiny_corpus(root: Path) -> Path:
    """root/data.bin/.idx and root/tok.json: 80 documents of 60 words, a 300-token BPE."""
    from trident.data.build import tokenize_files
    from trident.data.tokenizer import train_tokenizer

    lines = [json.dumps({"text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(60))}) for i in range(80)]
    (root / "c.jsonl").write_text("\n".join(lines) + "\n")
    train_tokenizer([root / "c.jsonl"], 300, root / "tok.json")
    tokenize_files([root / "c.jsonl"], root / "data", root / "tok.json", progress=False)
    return root


def train_command(corpus: Path, out: Path, *overrides: str, nproc: int = 1, extra: tuple = ()) -> list[str]:
    """`trident train tiny` on the corpus; LR decay fixed in tokens so train.steps does not change it."""
    return [sys.executable, "-m", "trident", "train", "tiny", f"data.paths=[{corpus / 'data'}]",
            f"data.tokenizer={corpus / 'tok.json'}", "train.decay_tokens=100000", "logging.log_interval=1",
            "parallel.timeout_s=30", "train.peak_tflops=1", *overrides, "--nproc", str(nproc), "--out", str(out), *extra]


def start(command: list[str], **env) -> subprocess.Popen:
    """A run in a session of its own (as a terminal job), one thread a rank."""
    return subprocess.Popen(command, env=dict(os.environ, OMP_NUM_THREADS="1", **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_steps(out: Path, steps: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Until OUT/metrics.jsonl has `steps` lines (raises if the run ends or time runs out first)."""
    deadline = time.time() + timeout
    metrics = out / "metrics.jsonl"
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= steps:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before step {steps}:\n{proc.stderr.read()}")
        time.sleep(0.1)
    raise AssertionError(f"no step {steps} within {timeout}s")


def losses(out: Path) -> dict[int, float]:
    """step -> loss from OUT/metrics.jsonl (a resumed step keeps its last value)."""
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (a run's output folder)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def wait_until_gone(text: str, timeout: float) -> list[int]:
    """Waits for every process mentioning `text` to end; returns those still alive at the timeout."""
    deadline = time.time() + timeout
    while (alive := processes_mentioning(text)) and time.time() < deadline:
        time.sleep(0.2)
    return alive


def kill_all(text: str) -> None:
    """Clean-up after a failed test: no run outlives it."""
    for pid in processes_mentioning(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
