"""Executors: run `fn` over a list of work items, locally (process pool) or on a Ray cluster.

Both promise the same thing: `map(fn, items)` == `[fn(x) for x in items]`, results in input order,
with a progress bar. `fn` must be a module-level function; items and results must be picklable
(they cross process boundaries). Shard files are passed as paths, so on a multi-node Ray cluster
the output directory must be on storage every node can see.
"""
from __future__ import annotations

import importlib
import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from trident.curate.document import CurateError
from trident.text.progress import progress_bar

if TYPE_CHECKING:  # imported where a pool starts: multiprocessing and the pools cost ~30 ms to import
    from concurrent.futures import ProcessPoolExecutor


def _progress(total: int, desc: str | None, enabled: bool):
    return progress_bar(total=total, desc=desc, unit="task", enabled=enabled, leave=False)


def _start_method() -> str:
    """How helpers start: forked while this process runs no other Python thread (a copy of it, numpy
    and trident already imported: ~0.05 s, where a fresh interpreter took ~0.5 s of a run of a few
    seconds; native pools such as OpenBLAS's are reset at fork by their own handlers, as with
    multiprocessing's fork default); otherwise spawned, a clean interpreter, since a fork copies
    locks that other threads may hold (logging's, a server's)."""
    import multiprocessing

    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


def _import_modules(modules: list[str]) -> None:
    """A helper's first job: import what the run's tasks need (see LocalExecutor.warm_up)."""
    for name in modules:
        importlib.import_module(name)


class LocalExecutor:
    """`workers` local helper processes, this one handing out the items (1: this process alone, no
    pool). The pool starts on first use (or `warm_up`) and is reused by every later `map` until
    `close`, so its start-up cost is paid once a run. This process does no item itself: an item run
    here held the interpreter in long C calls (an HTML parse, a regex over a large page), and the
    threads that notice a helper's finished item waited on it (on 766 documentation pages a helper
    sat idle ~0.5 s of a 2.5 s map, and up to 1.3 s for one item's result)."""

    dedup_on_workers = False  # fuzzy dedup's union-find runs here, on one machine

    def __init__(self, workers: int = 1, progress: bool = True) -> None:
        if workers < 1:
            raise CurateError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.progress = progress
        self._pool: ProcessPoolExecutor | None = None

    def warm_up(self, modules: list[str]) -> None:
        """Start the helpers now, each importing `modules` while this process reads the config and
        the inputs: a spawned helper's start-up (~0.5 s) otherwise delays the first map, and on a
        run of a few seconds it kept two workers from being twice as fast as one."""
        if self.workers > 1 and self._pool is None:
            self._pool = self._new_pool()
            for _ in range(self.workers):
                self._pool.submit(_import_modules, list(modules))

    def _new_pool(self) -> ProcessPoolExecutor:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context(_start_method()))

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
        """Each helper holds one item and gets the next the moment it finishes (items queued ahead
        in the pool would go to whichever helper frees first, not to the one that is idle)."""
        from concurrent.futures import FIRST_COMPLETED, wait

        if self._pool is None:
            self._pool = self._new_pool()
        results: list[Any] = [None] * len(items)
        waiting, running = deque(range(len(items))), {}
        while waiting or running:
            while waiting and len(running) < self.workers:
                index = waiting.popleft()
                running[self._pool.submit(fn, items[index])] = index
            for future in wait(running, return_when=FIRST_COMPLETED).done:
                results[running.pop(future)] = future.result()
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
    Fuzzy dedup on it runs every step in workers (trident.curate.dedup.fuzzy_distributed)."""

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

    def warm_up(self, modules: list[str]) -> None:
        """Nothing to do: Ray starts and keeps its own worker processes."""

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
