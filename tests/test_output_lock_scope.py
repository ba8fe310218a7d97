"""A folder's lock covers everything inside it (issue 58 item 1), and holders are told apart (item 3): a
command writing at or under a folder a live run holds exits 2 naming the holder, with or without
--overwrite, while the run's own steps write inside it and two prefixes share a folder nobody holds;
claim files are unique per host, process and attempt; a container's pids are not this machine's; a
process of another user is judged by its start time."""
import json
import os
import socket
import subprocess
import sys

import pytest

from flow_fixtures import run_main
from lock_fixtures import Holder
from train_fixtures import tiny_corpus
from trident.data import lock_records, output_lock, processes
from trident.data.output_lock import LOCK, FolderBusy, FolderLock

HOST = socket.gethostname()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return tiny_corpus(tmp_path_factory.mktemp("corpus"))


def tokenize(corpus, prefix, *extra):
    return run_main(["tokenize", "--input", str(corpus / "c.jsonl"), "--output-prefix", str(prefix),
                     "--tokenizer", str(corpus / "tok.json"), "--workers", "1", *extra])


def test_no_command_writes_inside_a_folder_a_live_run_holds(tmp_path, corpus):
    run = tmp_path / "run"
    holder = Holder(run)  # e.g. a `trident train --out RUN`, or a flow into RUN
    try:
        held_by = f"another trident run is writing into {run}, which holds it (host {HOST}, pid {holder.pid}, " \
                  f"run holder-run"
        for extra in ([], ["--overwrite"]):
            done = tokenize(corpus, run / "data", *extra)
            assert done["code"] == 2 and held_by in done["err"], done
        done = run_main(["curate", "curate-cc", "--input", str(corpus / "c.jsonl"), "--out",
                         str(run / "curated" / "docs"), "--overwrite"])
        assert done["code"] == 2 and held_by in done["err"], done
        assert sorted(p.name for p in run.iterdir()) == [LOCK]  # nothing written inside
    finally:
        holder.end()
    assert tokenize(corpus, run / "data")["code"] == 0  # the run ended: the folder is free


def test_two_prefixes_share_a_folder_nobody_holds_which_no_folder_lock_takes_meanwhile(tmp_path, corpus):
    folder = tmp_path / "datasets"
    holder = Holder(folder, name=f"{LOCK}.a")  # a tokenize writing datasets/a
    try:
        assert tokenize(corpus, folder / "b")["code"] == 0
        assert (folder / "b.bin").exists()
        done = run_main(["export-hf", str(tmp_path / "ckpt"), str(folder), "--overwrite"])
        assert done["code"] == 2, done
        assert f"another trident run is writing into {folder / 'a'}, inside it (host {HOST}, pid {holder.pid}" \
            in done["err"]
    finally:
        holder.end()


def test_a_runs_own_steps_write_inside_its_folder(tmp_path, corpus):
    with FolderLock(tmp_path / "flow", "the-flow"):  # `trident run` holds OUT; its steps run in it and under it
        assert tokenize(corpus, tmp_path / "flow" / "data" / "docs")["code"] == 0
        child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['TRIDENT_HELD_RUNS'])"],
                               capture_output=True, text=True)
        assert child.stdout.split() == ["the-flow"]  # a child process (train, eval) is the run's too
    assert "TRIDENT_HELD_RUNS" not in os.environ


def test_two_takers_with_one_pid_on_two_hosts_one_wins_without_a_traceback(tmp_path, monkeypatch):
    """Forced interleaving: taker B (another container: same pid, same hostname) claims between taker A's
    writing of its claim file and its link."""
    monkeypatch.setattr(output_lock, "HEARTBEAT_S", 0.02)
    monkeypatch.setattr(lock_records, "STALE_AFTER_S", 3.0)  # B beats every 0.02 s
    monkeypatch.setattr(lock_records, "POLL_S", 0.01)
    a, b = FolderLock(tmp_path, "run-a"), FolderLock(tmp_path, "run-b")
    b.record["machine"] = "another-container"
    link, names = os.link, []

    def interleaved(source, target):
        names.append(os.path.basename(source))
        if len(names) == 1:
            b.acquire()  # B creates and links its claim while A's temporary file waits
        return link(source, target)

    monkeypatch.setattr(output_lock.os, "link", interleaved)
    try:
        with pytest.raises(FolderBusy, match=f"pid {os.getpid()}, run run-b"):
            a.acquire()
        claims = sorted((tmp_path / LOCK).glob("claim-*.json"))
        assert [json.loads(p.read_text())["run_id"] for p in claims] == ["run-b"]
        assert len(set(names)) == 2 and all(f"{HOST}-{os.getpid()}-" in name for name in names)
    finally:
        b.release()


def test_a_container_sharing_the_hostname_is_judged_by_its_beat_not_by_pid(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    # a live run in a container beside this one: its pid (of its own pid namespace) is a dead one's here
    holder = Holder(tmp_path, machine="another-container", pid=str(gone.pid))
    try:
        with pytest.raises(FolderBusy, match=f"host {HOST}, pid {gone.pid}, run holder-run"):
            FolderLock(tmp_path, "new").acquire()  # its beat goes on: alive
    finally:
        holder.end()


def _verdicts_as_another_user(pid: int, right: str, wrong: str) -> list:
    """runs(pid, start) for the right and a wrong start time, judged by a process of another user."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover -- the child reports through the pipe
        os.close(read)
        os.setgid(65534)
        os.setuid(65534)
        try:
            os.kill(pid, 0)
            denied = False
        except PermissionError:
            denied = True
        os.write(write, json.dumps([denied, processes.runs(pid, right), processes.runs(pid, wrong)]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = json.loads(pipe.read())
    os.waitpid(child, 0)
    return answer


def test_a_pid_of_another_user_is_judged_by_its_start_time():
    if os.geteuid() == 0:  # root judges a process of its own as an unprivileged user would
        sleeper = subprocess.Popen(["sleep", "30"])
        try:
            started = processes.process_start(sleeper.pid)
            assert _verdicts_as_another_user(sleeper.pid, started, str(int(started) - 1)) == [True, True, False]
        finally:
            sleeper.kill()
            sleeper.wait()
    else:  # pid 1 belongs to another user (root)
        started = processes.process_start(1)
        assert processes.runs(1, started) and not processes.runs(1, str(int(started) + 1))
