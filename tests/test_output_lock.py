"""One run at a time in an output folder: a second run exits 2 at once naming the holder's host and
pid; a dead run's lock is taken over, and the taker says so."""
import json
import os
import signal
import socket
import time

import pytest

from train_fixtures import kill_all, start, tiny_corpus, train_command, wait_for_steps
from trident.cli import main
from trident.data.output_folder import OutputFolderError
from trident.data.output_lock import LOCK, STALE_AFTER_S, FolderBusy, FolderLock


def test_a_live_holder_refuses_others_and_shares_with_its_own_run(tmp_path):
    with FolderLock(tmp_path / "out", "run-a"):
        held = json.loads((tmp_path / "out" / LOCK).read_text())
        assert (held["host"], held["pid"], held["run_id"]) == (socket.gethostname(), os.getpid(), "run-a")
        with pytest.raises(FolderBusy, match=f"host {socket.gethostname()}, pid {os.getpid()}, run run-a"):
            FolderLock(tmp_path / "out", "run-b").acquire()
        assert isinstance(FolderBusy("x"), OutputFolderError)  # every command's folder error: exit 2
        joined = FolderLock(tmp_path / "out", "run-a").acquire()  # a restart of the same run
        assert joined.takeover_message() is None
        joined.release()
    assert not (tmp_path / "out" / LOCK).exists()


def test_a_stopped_heartbeat_is_a_dead_run_on_any_host(tmp_path):
    (tmp_path / LOCK).write_text(json.dumps({"host": "node-7", "pid": 1, "run_id": "old",
                                             "started": 0, "heartbeat": time.time() - STALE_AFTER_S - 1}))
    lock = FolderLock(tmp_path, "new").acquire()
    assert "took over the lock of a run that is no longer running (host node-7, pid 1, run old" in lock.takeover_message()
    lock.release()
    (tmp_path / LOCK).write_text(json.dumps({"host": "node-7", "pid": 1, "run_id": "old", "heartbeat": time.time()}))
    with pytest.raises(FolderBusy, match="host node-7, pid 1"):  # beating on another host: alive
        FolderLock(tmp_path, "new").acquire()


def test_a_second_curate_into_a_held_folder_exits_2(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": "a document"}) + "\n")
    with FolderLock(tmp_path / "out", "another-run"):
        assert main(["curate", "curate-cc", "--input", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'out'}: another trident run is writing into this folder (host {socket.gethostname()}" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


@pytest.mark.timeout(90)
def test_two_trainings_into_one_folder(tmp_path, capsys):
    corpus, out = tiny_corpus(tmp_path), tmp_path / "run"
    first = start(train_command(corpus, out, "train.steps=100000", "checkpoint.save_interval=0"))
    try:
        wait_for_steps(out, 1, first)
        started = time.time()
        assert main(train_command(corpus, out, "train.steps=2")[3:]) == 2
        assert time.time() - started < 5  # at once, before any model is built
        err = capsys.readouterr().err
        assert f"{out}: another trident run is writing into this folder (host {socket.gethostname()}, pid {first.pid}" in err
        lines = len((out / "metrics.jsonl").read_text().splitlines())
        os.killpg(first.pid, signal.SIGKILL)  # its lock stays behind, naming a dead pid
        first.wait(10)
        assert json.loads((out / LOCK).read_text())["pid"] == first.pid
        assert main(train_command(corpus, out, "train.steps=2", extra=("--overwrite",))[3:]) == 0
        err = capsys.readouterr().err
        assert f"{out}: took over the lock of a run that is no longer running (host {socket.gethostname()}, pid {first.pid}" in err
        assert len((out / "metrics.jsonl").read_text().splitlines()) == 2 and lines >= 1
        assert not (out / LOCK).exists()  # released at the end of the run
    finally:
        kill_all(str(out))
