"""Object-store failures end in one line naming the URL, the operation and the cause, with an exit code
fixed per kind (docs/bad-input.md#object-stores); a store that goes away mid-run leaves the last
complete checkpoint, from which `checkpoint.load=auto` resumes once the store is back; metrics.jsonl on a
store goes up in parts on a timer, so a run killed during a stall keeps the lines before it."""
import os
import signal
import subprocess
import time

import pytest

from train_fixtures import start, tiny_corpus, train_command
from trident.text.store_errors import EXIT_CODES
from trident.train.launch import free_port
from trident.train.metrics import read_metrics

NO_RETRY = {"AWS_MAX_ATTEMPTS": "1"}  # botocore's retries of a refused connection would take ~10 s a request
FAST = ["model.num_layers=1", "train.global_batch_size=2", "checkpoint.save_interval=2", "logging.metrics_upload_s=0.5"]


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, list[str], str]:
    """(exit code, the non-empty lines of stderr, stdout) of a started run."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, [line for line in err.splitlines() if line.strip()], out


def _wait_for(check, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while not check():
        if proc.poll() is not None or time.time() > deadline:
            raise AssertionError(f"{what}: not seen (exit {proc.poll()}): {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_store_failures_are_one_line_and_a_run_resumes_once_the_store_is_back(s3, tmp_path):
    corpus = tiny_corpus(tmp_path)
    missing = start(train_command(corpus, "s3://no-such-bucket/run", *FAST, "train.steps=2"))
    nobody = f"http://127.0.0.1:{free_port()}"  # no server there
    away = start(train_command(corpus, s3.url("away/run"), *FAST, "train.steps=2"), AWS_ENDPOINT_URL=nobody,
                 FSSPEC_S3_ENDPOINT_URL=nobody, **NO_RETRY)
    ended = [(_finish(missing), "missing bucket", "s3://no-such-bucket/run"),
             (_finish(away), "unreachable", s3.url("away/run"))]
    with s3.refusing_credentials():  # after the others: they would be refused too
        refused = _finish(start(train_command(corpus, s3.url("refused/run"), *FAST, "train.steps=2")))
    for (code, lines, _), kind, url in [*ended, (refused, "access denied", s3.url("refused/run"))]:
        assert code == EXIT_CODES[kind] and len(lines) == 1, (kind, code, lines)  # found before any work
        assert lines[0].startswith(f"trident train: error: {url}: checking bucket") and f": {kind} (" in lines[0]

    run = s3.url("fail/run")
    proc = start(train_command(corpus, run, *FAST, "train.steps=6"), TRIDENT_INJECT="rank=0,step=4,kind=slow:1.5",
                 **NO_RETRY)
    _wait_for(lambda: "step      3 |" in proc.stdout.readline(), proc, "step 3")  # checkpoint 2 and its metrics are up
    s3.pause()  # the store goes away during step 4 (slowed): its save meets it
    try:
        code, lines, _ = _finish(proc)
    finally:
        s3.restart()
    assert code == EXIT_CODES["unreachable"], (code, lines)
    ended = [line for line in lines if "lock's heartbeat could not be written" not in line]  # the lock's own log
    assert len(ended) == 1 and ended[0].startswith(f"error: {run}/checkpoints/step_0000004: rank 0: "), lines
    assert not s3.fs.exists(f"{run}/checkpoints/step_0000004/COMPLETE")
    resumed = start(train_command(corpus, run, *FAST, "train.steps=6", "checkpoint.load=auto"))
    code, lines, out = _finish(resumed)
    assert code == 0 and f"resumed from {run}/checkpoints/step_0000002 at step 2" in out, (lines, out)
    steps = [r["step"] for r in read_metrics(f"{run}/metrics.jsonl")]  # step 3's line may have gone up before
    assert steps[:2] == [1, 2] and steps[-4:] == [3, 4, 5, 6] and set(steps) == set(range(1, 7)), steps
    assert s3.fs.exists(f"{run}/checkpoints/step_0000006/COMPLETE")


@pytest.mark.timeout(180)
def test_a_store_that_goes_away_under_the_launcher_ends_in_its_line_and_code(s3, tmp_path):
    run = s3.url("launched/run")
    proc = start(train_command(tiny_corpus(tmp_path), run, *FAST, "train.steps=6", "train.micro_batch_size=1", nproc=2),
                 TRIDENT_INJECT="rank=0,step=4,kind=slow:1.5", **NO_RETRY)
    _wait_for(lambda: "step      3 |" in proc.stdout.readline(), proc, "step 3")
    s3.pause()  # during step 4: the ranks' exit marker on the store is gone with it
    try:
        code, lines, _ = _finish(proc)
    finally:
        s3.restart()
    assert code == EXIT_CODES["unreachable"] and not any("Traceback" in line for line in lines), (code, lines)
    assert lines[-1].startswith(f"error: {run}/checkpoints/step_0000004: rank ") and ": unreachable (" in lines[-1]
    assert not any("peer" in line or "ChildFailedError" in line for line in lines), lines  # only the failure's line


@pytest.mark.timeout(180)
def test_metrics_on_a_store_keep_the_lines_before_a_stall_through_a_sigkill(s3, tmp_path):
    corpus = tiny_corpus(tmp_path)
    run = s3.url("stall/run")
    proc = start(train_command(corpus, run, *FAST, "train.steps=8", "checkpoint.save_interval=0"),
                 TRIDENT_INJECT="rank=0,step=4,kind=hang")  # no checkpoint before the stall: only the timer uploads
    _wait_for(lambda: "step      3 |" in proc.stdout.readline(), proc, "step 3")
    time.sleep(3 * 0.5)  # past the timer's interval (logging.metrics_upload_s) and an upload
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert [r["step"] for r in read_metrics(f"{run}/metrics.jsonl")] == [1, 2, 3]
    assert not s3.fs.exists(f"{run}/metrics.jsonl") and len(s3.fs.ls(f"{run}/metrics.jsonl.parts")) >= 1  # parts


def test_a_log_on_a_store_is_read_whole_in_parts_after_a_join_and_when_a_join_was_cut_short():
    import fsspec

    from trident.text.appended import AppendedObject, read_lines

    memory, log = fsspec.filesystem("memory"), "memory://appended-test/metrics.jsonl"
    writer = AppendedObject(log, interval_s=3600, append=False)  # no tick: uploads only when asked
    for i in range(3):
        writer.append(f"line {i}")
    writer.upload()
    writer.append("line 3")
    writer.upload()
    assert sorted(memory.ls("/appended-test/metrics.jsonl.parts", detail=False)) == [
        "/appended-test/metrics.jsonl.parts/000000000000.jsonl", "/appended-test/metrics.jsonl.parts/000000000003.jsonl"]
    assert read_lines(log) == [f"line {i}" for i in range(4)] and not memory.exists("/appended-test/metrics.jsonl")
    writer.close()  # joined into the one object, parts removed
    assert memory.cat_file("/appended-test/metrics.jsonl") == b"".join(f"line {i}\n".encode() for i in range(4))
    assert not memory.exists("/appended-test/metrics.jsonl.parts")

    resumed = AppendedObject(log, interval_s=3600, append=True)  # a resume appends after the 4 lines
    resumed.append("line 4")
    resumed.upload()
    memory.pipe("/appended-test/metrics.jsonl.parts/000000000002.jsonl", b"line 2\nline 3\n")  # a join cut short
    assert read_lines(log) == [f"line {i}" for i in range(5)]  # every line once
    resumed.close()
    assert read_lines(log) == [f"line {i}" for i in range(5)] and not memory.exists("/appended-test/metrics.jsonl.parts")
    memory.rm("/appended-test", recursive=True)
