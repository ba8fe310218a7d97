"""One run at a time in an output folder: a second run exits 2 at once naming the holder's host and
pid; the nodes of one job share the lock until the last ends; a dead run's lock is taken over by
exactly one taker, who says so; a heartbeat that cannot be written is reported to the run."""
import json
import logging
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from train_fixtures import kill_all, start, tiny_corpus, train_command, wait_for_steps
from trident.cli import main
from trident.data import lock_records, output_lock, processes
from trident.data.output_lock import LOCK, FolderBusy, FolderLock, FolderLockLost
from trident.train.launch import free_port

FORK = multiprocessing.get_context("fork")
HOST = socket.gethostname()


def records(folder):
    return {p.name: json.loads(p.read_text()) for p in (folder / LOCK).glob("node-*.json")}


def plant(folder, run_id, host, pid, beat=0, gen=1):
    """A lock as a run left it: its claim and one node record (this machine's when `host` is this host's)."""
    (folder / LOCK).mkdir(parents=True, exist_ok=True)
    machine = processes.machine() if host == HOST else f"another-machine-{host}"
    held = {"host": host, "machine": machine, "pid": pid, "run_id": run_id, "started": 0}
    (folder / LOCK / f"claim-{gen}.json").write_text(json.dumps(held))
    (folder / LOCK / f"node-{host}-{pid}-0.json").write_text(json.dumps(held | {"beat": beat, "gen": gen}))


def dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_live_holder_refuses_others_and_shares_with_its_own_run(tmp_path):
    with FolderLock(tmp_path / "out", "run-a"):
        (held,) = records(tmp_path / "out").values()
        assert (held["host"], held["pid"], held["run_id"]) == (HOST, os.getpid(), "run-a")
        with pytest.raises(FolderBusy, match=f"host {HOST}, pid {os.getpid()}, run run-a"):
            FolderLock(tmp_path / "out", "run-b").acquire()
    assert not (tmp_path / "out" / LOCK).exists()  # nothing left behind
    FolderLock(tmp_path / "out", "run-b").acquire().release()


def _node(folder, run_id, go, done):
    """One node's launcher of a job: hold the lock until told to end."""
    lock = FolderLock(folder, run_id).acquire()
    done.put((os.getpid(), lock.takeover_message()))
    go.wait(30)
    lock.release()


def test_the_nodes_of_one_job_hold_the_lock_until_the_last_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(output_lock, "HEARTBEAT_S", 0.05)
    done = FORK.Queue()
    ends = [FORK.Event(), FORK.Event()]
    nodes = [FORK.Process(target=_node, args=(tmp_path, "rdzv:job-7", end, done)) for end in ends]
    for node in nodes:
        node.start()
        assert done.get(timeout=30)[1] is None  # the second node joins the first's lock: no takeover
    try:
        assert len(records(tmp_path)) == 2
        ends[1].set()  # the node that joined last ends first
        nodes[1].join(30)
        time.sleep(0.2)  # the other node's heartbeat goes on
        (first,) = records(tmp_path).values()
        assert first["pid"] == nodes[0].pid and first["beat"] >= 1
        with pytest.raises(FolderBusy, match=f"pid {nodes[0].pid}, run rdzv:job-7"):
            FolderLock(tmp_path, "another-run").acquire()
        ends[0].set()
        nodes[0].join(30)
        after = FolderLock(tmp_path, "another-run").acquire()  # the last node ended: free, no takeover
        assert after.takeover_message() is None
        after.release()
    finally:
        for node in nodes:
            node.kill()


def _taker(folder, barrier, results, trials):
    for trial in range(trials):
        barrier.wait(30)  # the stale lock is planted
        try:
            lock = FolderLock(folder, f"run-{os.getpid()}-{trial}").acquire()
            results.put(("won", lock.takeover_message()))
            barrier.wait(30)  # everyone has answered
            lock.release()
        except FolderBusy as error:
            results.put(("busy", str(error)))
            barrier.wait(30)
        barrier.wait(30)  # released: the next trial may be planted


def test_two_processes_taking_over_one_stale_lock_exactly_one_wins(tmp_path):
    takers, trials = 4, 50
    barrier, results = FORK.Barrier(takers + 1), FORK.Queue()
    procs = [FORK.Process(target=_taker, args=(tmp_path, barrier, results, trials)) for _ in range(takers)]
    for proc in procs:
        proc.start()
    try:
        gone = dead_pid()
        for trial in range(trials):
            plant(tmp_path, "dead-run", HOST, gone, gen=trial + 3)
            barrier.wait(30)
            answers = [results.get(timeout=30) for _ in range(takers)]
            won = [message for kind, message in answers if kind == "won"]
            assert len(won) == 1, (trial, answers)
            assert f"took over the lock of a run that is no longer running (host {HOST}, pid {gone}" in won[0]
            barrier.wait(30)
            barrier.wait(30)
            assert not (tmp_path / LOCK).exists()
    finally:
        for proc in procs:
            proc.kill()


def test_a_local_pid_is_judged_before_any_heartbeat(tmp_path):
    plant(tmp_path, "old", HOST, dead_pid(), beat=10**9)  # a fresh-looking record of a dead process
    started = time.monotonic()
    lock = FolderLock(tmp_path, "new").acquire()
    assert time.monotonic() - started < 2 and "took over" in lock.takeover_message()
    lock.release()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        plant(tmp_path, "old", HOST, sleeper.pid, beat=0)  # a live process whose record never beats
        with pytest.raises(FolderBusy, match=f"pid {sleeper.pid}, run old"):
            FolderLock(tmp_path, "new").acquire()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_another_hosts_record_is_judged_by_whether_it_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(lock_records, "STALE_AFTER_S", 0.4)
    monkeypatch.setattr(lock_records, "POLL_S", 0.02)
    plant(tmp_path, "old", "node-7", 1, beat=5)  # its clock says nothing: no time field is read
    lock = FolderLock(tmp_path, "new").acquire()
    assert "took over the lock of a run that is no longer running (host node-7, pid 1, run old" in lock.takeover_message()
    lock.release()
    plant(tmp_path, "old", "node-7", 1, beat=5)
    record, stop = tmp_path / LOCK / "node-node-7-1-0.json", threading.Event()

    def beat():  # node-7's heartbeat, still going
        for n in range(6, 10**6):
            if stop.wait(0.1):
                return
            record.write_text(json.dumps(json.loads(record.read_text()) | {"beat": n}))

    beating = threading.Thread(target=beat)
    beating.start()
    try:
        with pytest.raises(FolderBusy, match="host node-7, pid 1"):
            FolderLock(tmp_path, "new").acquire()
    finally:
        stop.set()
        beating.join()


def test_a_heartbeat_that_fails_is_reported_to_the_run(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(output_lock, "HEARTBEAT_S", 0.02)
    monkeypatch.setattr(lock_records, "STALE_AFTER_S", 0.2)
    told = []
    lock = FolderLock(tmp_path, "run-a", on_lost=told.append).acquire()
    (tmp_path / LOCK).rename(tmp_path / "moved")
    (tmp_path / LOCK).write_text("a file where the lock folder was: every heartbeat write fails")
    with caplog.at_level(logging.ERROR, logger=output_lock.__name__):
        lock._beat.join(10)
    assert told and "the folder lock's heartbeat failed for" in told[0]
    assert "heartbeat could not be written" in caplog.text
    with pytest.raises(FolderLockLost, match="another run may take this folder over"):
        lock.check()
    lock.release()
    taken = FolderLock(tmp_path / "b", "run-b", on_lost=told.append).acquire()
    for record in (tmp_path / "b" / LOCK).glob("node-*.json"):
        record.unlink()  # what a taker does to a record it judged dead
    taken._beat.join(10)
    assert "was removed by another process" in told[-1]
    with pytest.raises(FolderLockLost):
        taken.check()
    taken.release()


@pytest.mark.timeout(120)
def test_two_trainings_into_one_folder(tmp_path, capsys):
    """A two-node job (two launchers, one rendezvous) holds OUT with one record per node; another run is
    refused naming a holder, also after one node is lost (SIGKILL: its record names a dead pid) while the
    other still runs; when the last node ends, a new run takes OUT over, naming the lost node."""
    corpus, out, port = tiny_corpus(tmp_path), tmp_path / "run", free_port()

    def node(hosts_store, *extra, **env):
        nodes = ("--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job-7",
                 "--rdzv-conf", f"is_host={str(hosts_store).lower()}", *extra)  # the node that stays hosts the store
        return start(train_command(corpus, out, "train.steps=100000", extra=nodes), **env)

    # the staying node's rank stops making progress at step 2 (whichever rank it is): the job runs on; had
    # the loss reached that rank in a collective of step 1, its node would wait in a new rendezvous round
    stays = node(True, "--max-restarts", "1", TRIDENT_INJECT="rank=0,step=2,kind=hang;rank=1,step=2,kind=hang")
    lost = node(False)
    try:
        wait_for_steps(out, 1, stays)
        held = records(out).values()
        assert sorted(r["pid"] for r in held) == sorted([stays.pid, lost.pid])
        assert {r["run_id"] for r in held} == {"rdzv:job-7"} and {r["host"] for r in held} == {HOST}
        assert main(train_command(corpus, out, "train.steps=2")[3:]) == 2  # at once, before any model is built
        err = capsys.readouterr().err
        assert re.search(f"{re.escape(str(out))}: another trident run is writing into this folder \\(host {HOST}, "
                         f"pid ({stays.pid}|{lost.pid}), run rdzv:job-7, started", err), err
        os.killpg(lost.pid, signal.SIGKILL)  # a node lost: its launcher (torchrun and rank die with it)
        lost.wait(10)
        assert lost.pid in [r["pid"] for r in records(out).values()]  # its record stays, naming a dead pid
        assert main(train_command(corpus, out, "train.steps=2")[3:]) == 2  # the other node still holds OUT
        assert f"(host {HOST}, pid {stays.pid}, run rdzv:job-7" in capsys.readouterr().err
        while stays.poll() is None:  # the last node ends: Ctrl-C twice stops its ranks without saving
            os.kill(stays.pid, signal.SIGINT)
            time.sleep(0.1)
        assert [r["pid"] for r in records(out).values()] == [lost.pid]  # the ended node left; the lost one did not
        assert main(train_command(corpus, out, "train.steps=2", extra=("--overwrite",))[3:]) == 0
        err = capsys.readouterr().err
        assert f"{out}: took over the lock of a run that is no longer running (host {HOST}, pid {lost.pid}" in err
        assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
        assert not (out / LOCK).exists()  # released at the end of the run
    finally:
        kill_all(str(out))
