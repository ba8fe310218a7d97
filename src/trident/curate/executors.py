"""Executors: run `fn` over a list of work items, locally (process pool) or on a Ray cluster.

Both promise the same thing: `map(fn, items)` == `[fn(x) for x in items]`, results in input order,
with a progress bar. `fn` must be a module-level function; items and results must be picklable
(they cross process boundaries). Shard files are passed as paths, so on a multi-node Ray cluster
the output directory must be on storage every node can see.
"""
from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable

from trident.curate.document import CurateError


class _Quiet:
    """The part of tqdm's interface the executors use, doing nothing (progress off: no tqdm import,
    which costs ~0.03 s of a short run)."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_Quiet":
        return self

    def __exit__(self, *exc) -> None:
        pass


def _progress(total: int, desc: str | None, enabled: bool):
    if not enabled:
        return _Quiet()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="task", leave=False)


class LocalExecutor:
    """`workers` local processes: this one and `workers - 1` helpers (1: this process alone, no
    pool). The pool starts on first use and is reused by every later `map` until `close`, so its
    start-up cost is paid once a run."""

    dedup_on_workers = False  # fuzzy dedup's union-find runs here, on one machine

    def __init__(self, workers: int = 1, progress: bool = True) -> None:
        if workers < 1:
            raise CurateError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.progress = progress
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], items: list, desc: str | None = None) -> list:
        items = list(items)
        bar = _progress(len(items), desc, self.progress)
        try:
            if self.workers == 1 or len(items) <= 1:
                results = []
                for item in items:
                    results.append(fn(item))
                    bar.update()
                return results
            return self._pool_map(fn, items, bar)
        finally:
            bar.close()

    def _pool_map(self, fn, items: list, bar) -> list:
        """This process is one of the workers: it runs the next item itself while each of the
        `workers - 1` helper processes has one queued, so N workers start N - 1 interpreters."""
        helpers = self.workers - 1
        if self._pool is None:
            # spawn: helpers start clean (no inherited threads or locks), like Ray workers do.
            self._pool = ProcessPoolExecutor(max_workers=helpers, mp_context=multiprocessing.get_context("spawn"))
        results: list[Any] = [None] * len(items)
        waiting, futures = deque(range(len(items))), {}
        while waiting or futures:
            while waiting and len(futures) < helpers:
                index = waiting.popleft()
                futures[self._pool.submit(fn, items[index])] = index
            if waiting:
                index = waiting.popleft()
                results[index] = fn(items[index])
                bar.update()
            done = [f for f in futures if f.done()] if waiting else wait(futures, return_when=FIRST_COMPLETED).done
            for future in done:
                results[futures.pop(future)] = future.result()
                bar.update()
        return results

    def close(self) -> None:
        """Stop the worker processes (if any were started)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class RayExecutor:
    """Ray tasks, one per item. Connects to `address` (e.g. "auto" or "ray://host:10001") when
    given, otherwise starts a local Ray with `workers` CPUs. `close` shuts down what it started.
    Fuzzy dedup on it runs every step in workers (trident.curate.dedup_distributed)."""

    dedup_on_workers = True

    def __init__(self, workers: int = 1, address: str | None = None, progress: bool = True) -> None:
        try:
            import ray
        except ImportError as err:
            raise CurateError("executor 'ray' needs Ray: pip install 'trident-lm[ray]'") from err
        self._ray = ray
        self.progress = progress
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=workers, **kwargs)
            self._started = True
        self.workers = max(1, int(ray.cluster_resources().get("CPU", workers)))

    def map(self, fn: Callable[[Any], Any], items: list, desc: str | None = None) -> list:
        ray = self._ray
        remote = ray.remote(num_cpus=1)(fn)
        refs = [remote.remote(item) for item in items]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        with _progress(len(refs), desc, self.progress) as bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    results[index[ref]] = ray.get(ref)
                    bar.update()
        return results

    def close(self) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()


def make_executor(kind: str, workers: int = 1, address: str | None = None, progress: bool = True):
    """'local' or 'ray' executor; `workers` 0 means one per CPU core."""
    workers = workers or os.cpu_count() or 1
    if kind == "local":
        return LocalExecutor(workers, progress=progress)
    if kind == "ray":
        return RayExecutor(workers, address=address, progress=progress)
    raise CurateError(f"executor must be 'local' or 'ray', got {kind!r}")
