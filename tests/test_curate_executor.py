"""LocalExecutor: results in input order from this process and its helpers, helpers started (and their
modules imported) by warm_up before the first map, and no worker left idle while another finishes an item."""
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from trident.curate.run.executors import LocalExecutor


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _square(x: int) -> int:
    return x * x


_SET_IN_THIS_PROCESS = []  # a forked helper has a copy; a spawned one imports the module afresh


def _copied_state(_) -> tuple[int, list]:
    return os.getpid(), list(_SET_IN_THIS_PROCESS)


@pytest.mark.timeout(60)
def test_two_workers_share_equal_items_evenly_and_keep_the_order():
    executor = LocalExecutor(workers=2, progress=False)
    try:
        executor.warm_up(["json", __name__])
        assert executor.map(_square, list(range(7))) == [x * x for x in range(7)]  # the helper is up now
        pids = executor.map(_pid_after, [0.5] * 4)
        # Each worker holds one item and takes the next when it finishes: 2 + 2, never 3 + 1.
        assert sorted(pids.count(pid) for pid in set(pids)) == [2, 2]
        # Two helpers, this process only hands items out: an item run here held the interpreter, and the
        # threads that notice a helper's finished item waited on it while the helper sat idle.
        assert os.getpid() not in pids
    finally:
        executor.close()


def test_one_worker_runs_everything_here_and_warm_up_starts_nothing():
    executor = LocalExecutor(workers=1, progress=False)
    executor.warm_up([__name__])
    assert executor._pool is None
    assert executor.map(_pid_after, [0.0, 0.0]) == [os.getpid()] * 2
    executor.close()


def _states_seen_by_helper(other_thread: bool) -> list:
    """In a clean process (no thread but its own): what a LocalExecutor's helper sees of this process."""
    _SET_IN_THIS_PROCESS[:] = ["set before the helper started"]
    stop = threading.Event()
    if other_thread:
        threading.Thread(target=stop.wait, daemon=True).start()
    executor = LocalExecutor(workers=2, progress=False)
    try:
        executor.warm_up([__name__])
        results = executor.map(_copied_state, list(range(6)))
    finally:
        executor.close()
        stop.set()
    return [state for pid, state in results if pid != os.getpid()]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("other_thread", [False, True])
def test_helpers_fork_only_while_no_other_thread_runs(other_thread):
    """A forked helper starts in milliseconds, but copies locks other threads may hold: with another
    thread alive the helper is spawned instead. Either way the results are the same. Run in a fresh
    process: a test worker may hold threads earlier tests left (servers, Ray)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as clean:
        helper = clean.submit(_states_seen_by_helper, other_thread).result(timeout=50)
    assert helper, "the helper ran no item"
    assert all(state == ([] if other_thread else ["set before the helper started"]) for state in helper)


@pytest.mark.timeout(60)
def test_a_curate_run_starts_its_helpers_before_the_folder_lock_thread(tmp_path, monkeypatch):
    """The output folder's lock runs a heartbeat thread; helpers started after it would be spawned
    (a fresh interpreter each, ~0.5 s) instead of forked."""
    from trident.curate.run import executors
    from trident.curate.run.pipeline import run_pipeline

    threads_at_start = []
    real_start_method = executors._start_method
    monkeypatch.setattr(executors, "_start_method",
                        lambda: threads_at_start.append([t.name for t in threading.enumerate()]) or real_start_method())
    (tmp_path / "in.jsonl").write_text("".join(f'{{"id": "d{i}", "text": "document {i} text"}}\n' for i in range(4)))
    run_pipeline([{"stage": "exact_dedup"}], [tmp_path / "in.jsonl"], tmp_path / "out", workers=2,
                 overrides=["progress=false"])
    assert len(threads_at_start) == 1 and "trident-folder-lock" not in threads_at_start[0]
