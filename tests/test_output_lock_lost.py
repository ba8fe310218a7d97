"""A run whose lock is lost stops writing at once (issue 58 item 2): train leaves no checkpoint and no
preempted.json in the folder another run took over, a tokenize stops while it works, exit 2 with the
reason; a heartbeat never writes back a record a taker removed, and gives up when a newer claim exists."""
import json
import os
import signal
from pathlib import Path

import pytest

from lock_fixtures import start_command, wait_for
from train_fixtures import WORDS, kill_all, tiny_corpus, train_command
from trident.data import lock_records, output_lock
from trident.data.output_lock import LOCK, FolderLock


@pytest.fixture
def fast_judging(monkeypatch):
    """A record whose beat stays the same for 0.5 s is a dead run's."""
    monkeypatch.setattr(lock_records, "STALE_AFTER_S", 0.5)
    monkeypatch.setattr(lock_records, "POLL_S", 0.02)


def stopped(pid: int) -> bool:
    """Whether every thread of `pid` has stopped: a thread in a system call (the heartbeat's write of its
    record) stops only when the call returns, and a beat that lands then makes the taker judge it alive."""
    states = []
    for stat in (Path("/proc") / str(pid) / "task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):  # a thread that ended since the listing
            continue
    return bool(states) and all(state in "tT" for state in states)


def take_over(proc, folder, name=LOCK) -> FolderLock:
    """Another run takes the folder over while `proc` is frozen (SIGSTOP: its beat stops, as a paused
    container's or a host's behind a partition), then `proc` goes on (SIGCONT)."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: stopped(proc.pid))
        taker = FolderLock(folder, "taker", name=name).acquire()
        message = taker.takeover_message() or ""
        if "took over the lock of a run that is no longer running" not in message:
            taker.release()  # not left held for the tests after this one
            pytest.fail(f"the taker did not take the lock over: {message!r}")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    return taker


@pytest.mark.timeout(240)
def test_train_whose_lock_is_lost_stops_at_once_without_a_checkpoint(tmp_path, fast_judging):
    corpus, out = tiny_corpus(tmp_path), tmp_path / "run"
    args = train_command(corpus, out, "train.steps=100000", "checkpoint.save_interval=100000")[3:]
    proc = start_command(args)
    try:
        wait_for(lambda: (out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text(), proc=proc)
        taker = take_over(proc, out)
        try:
            assert proc.wait(60) == 2
            err = proc.stderr.read()
            assert "another run took this folder over" in err and "stopped at once" in err, err
            assert not (out / "preempted.json").exists() and not list(out.glob("checkpoints/step_*"))
            claims = sorted(p.name for p in (out / LOCK).glob("claim-*.json"))
            assert claims == ["claim-2.json"]  # the taker's claim stays
        finally:
            taker.release()
    finally:
        kill_all(str(out))


def test_a_tokenize_whose_lock_is_lost_stops_while_it_works(tmp_path, fast_judging):
    corpus = tiny_corpus(tmp_path)
    lines = [json.dumps({"text": " ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(200))}) for i in range(30000)]
    (tmp_path / "big.jsonl").write_text("\n".join(lines) + "\n")
    folder = tmp_path / "datasets"
    proc = start_command(["tokenize", "--input", str(tmp_path / "big.jsonl"), "--output-prefix", str(folder / "big"),
                          "--tokenizer", str(corpus / "tok.json"), "--workers", "1"])
    try:
        # its record naming the claim it holds: a process stopped before that holds no lock yet
        wait_for(lambda: any((lock_records.read_record(p) or {}).get("gen")
                             for p in folder.glob(f"{LOCK}.big/node-*.json")), proc=proc)
        taker = take_over(proc, folder, f"{LOCK}.big")
        try:
            assert proc.wait(60) == 2
            assert "stopped at once" in proc.stderr.read()
            assert not (folder / "big.stats.json").exists()  # it did not go on to the end
        finally:
            taker.release()
    finally:
        proc.kill()


def test_a_heartbeat_never_writes_back_a_record_a_taker_removed(tmp_path, monkeypatch):
    """Forced interleaving: a taker claims the next generation and removes the record between the
    heartbeat's look at its record and its rewrite."""
    monkeypatch.setattr(output_lock, "HEARTBEAT_S", 0.02)
    told = []
    lock = FolderLock(tmp_path, "run-a", on_lost=told.append).acquire()
    write = lock._write_record

    def taken_meanwhile():
        (tmp_path / LOCK / "claim-2.json").write_text(json.dumps({"run_id": "taker"}))
        lock.mine.unlink(missing_ok=True)
        write()

    monkeypatch.setattr(lock, "_write_record", taken_meanwhile)
    lock._beat.join(10)
    assert told and "no longer the newest (claim 2): another run took this folder over" in told[0]
    assert not lock.mine.exists()  # not written back
    lock.release()
    assert (tmp_path / LOCK / "claim-2.json").exists()  # the taker's claim is left alone
