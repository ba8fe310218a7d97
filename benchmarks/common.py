"""Shared helpers of the benchmarks: synthetic token data, gloo worker processes, machine load,
and the table + JSON-line output every benchmark prints.

Benchmarks are scripts, not tests: each prints a table and one line `JSON {...}` with its figures
(and the load average of the machine, since CPU timings on a shared machine drift with it).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue as queue_module
import resource
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np

from trident.train.launch import free_port

# Benchmarks run as `python benchmarks/X.py`; make the sibling module importable for forked workers too.
sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parent.parent


def timed_processes(*commands: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of child processes started together and run to completion (CPU:
    theirs and their own children's), trident imported from this checkout's src/."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for command in commands]
    failed = [command for command, proc in zip(commands, procs) if proc.wait() != 0]
    if failed:
        raise SystemExit(f"failed (run it by hand to see why): {' '.join(map(str, failed[0]))}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - start, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class RandomTokens:
    """Deterministic synthetic samples: index -> seq_len + 1 token ids below `vocab`."""

    def __init__(self, seq_length: int, vocab: int, n: int = 512, seed: int = 0):
        self.data = np.random.default_rng(seed).integers(0, vocab, size=(n, seq_length + 1))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.data[index % len(self.data)]


def load_average() -> dict:
    """1/5/15-minute load averages and core count, recorded beside every figure."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": round(one, 2), "load_5m": round(five, 2), "load_15m": round(fifteen, 2),
            "cpus": os.cpu_count()}


class Timer:
    """Wall time and this process's CPU time (user + system) of a block. On a shared machine the
    wall time of a step swings with other jobs; the CPU time of a 1-thread process is the work it
    did, so ratios of CPU times compare two loops even when the machine is oversubscribed."""

    def __enter__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0


def matmul_peak_tflops(dtype, device: str = "cpu", size: int = 1024, seconds: float = 2.0,
                       configured: float = 0.0) -> dict:
    """The MFU denominator, {"wall": ..., "cpu": ...} TFLOP/s: a known GPU's peak (both; `configured`
    for a GPU not in trident.hardware.GPU_PEAKS), else this CPU's sustained size^3 matmul rate now
    with the current thread count, per wall second and per CPU second of this process (the latter
    unaffected by other jobs taking the cores)."""
    import torch

    from trident.hardware import peak_tflops

    if device == "cuda":
        value = peak_tflops(torch.device("cuda"), dtype, configured)
        return {"wall": value, "cpu": value}
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    best = {"wall": 0.0, "cpu": 0.0}
    # The fastest of the kernels a model uses: on CPUs without native bf16, F.linear (oneDNN) runs
    # bf16 ~10x faster than torch.mm; in fp32 they are close.
    for op in (torch.mm, torch.nn.functional.linear):
        op(a, b)
        count = 0
        with Timer() as timer:
            while time.perf_counter() - timer.wall0 < seconds / 2 or count < 2:
                op(a, b)
                count += 1
        flops = 2.0 * size**3 * count / 1e12
        best = {"wall": max(best["wall"], flops / timer.wall), "cpu": max(best["cpu"], flops / timer.cpu)}
    return best


_LOOP = ("import sys, time\n"
         "n, wall, cpu, x = int(sys.argv[1]), time.perf_counter(), time.process_time(), 0\n"
         "for i in range(n):\n    x += i * i\n"
         "print(time.perf_counter() - wall, time.process_time() - cpu)\n")


def _loops(n: int, copies: int) -> list[tuple[float, float]]:
    """(wall s, CPU s) of the pure-Python loop of n steps in each of `copies` processes run at once."""
    procs = [subprocess.Popen([sys.executable, "-c", _LOOP, str(n)], stdout=subprocess.PIPE, text=True)
             for _ in range(copies)]
    return [tuple(float(v) for v in p.communicate()[0].split()) for p in procs]


def two_process_ceiling(seconds: float = 1.5, repeats: int = 2) -> dict:
    """This machine's own 1 -> 2 process ceiling, now: one pure-Python loop alone, then two copies in
    two processes at once (nothing shared). "throughput": the pair's steps per wall second over one
    loop's (2.0 on two free cores); "cpu_per_step": the pair's CPU per step over one loop's (1.0 when
    a busy second core does not slow the first: more on shared or hyper-threaded vCPUs). Best of
    `repeats`."""
    (wall, _), = _loops(200_000, 1)
    n = max(100_000, int(200_000 * seconds / max(wall, 1e-6)))
    best = {"throughput": 0.0, "cpu_per_step": float("inf")}
    for _ in range(repeats):
        (wall1, cpu1), = _loops(n, 1)
        pair = _loops(n, 2)
        best["throughput"] = max(best["throughput"], 2 * wall1 / max(w for w, _ in pair))
        best["cpu_per_step"] = min(best["cpu_per_step"], sum(c for _, c in pair) / (2 * cpu1))
    return {k: round(v, 3) for k, v in best.items()}


def median(values) -> float:
    return float(statistics.median(values))


def print_table(title: str, headers: list[str], rows: list[list]) -> None:
    """A plain fixed-width table (readable in logs and pasteable into markdown)."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")


def _fmt(value) -> str:
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4g}" if abs(value) < 10 else f"{value:,.1f}"
        return f"{value:.3e}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def emit_json(benchmark: str, payload: dict) -> None:
    """The machine-readable result: one line starting with 'JSON '."""
    print("JSON " + json.dumps({"benchmark": benchmark, **payload, "machine": load_average()}))


# ---- gloo worker processes (fork, 127.0.0.1, one thread each, hard timeout) -------------------------

def _worker(fn, rank, world_size, port, threads, results, args, core):
    import torch
    import torch.distributed as dist

    if core is not None:  # a core of its own (the kernel would otherwise move it and its gloo threads)
        os.sched_setaffinity(0, {core})
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch's rename notices of *_tensor collectives
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=300))
        results.put((rank, "ok", fn(rank, world_size, *args)))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # report any failure to the parent instead of hanging it
        results.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, world_size: int, *args, threads: int = 1, timeout: float = 600.0, pin_cores: bool = False) -> list:
    """fn(rank, world_size, *args) on `world_size` gloo ranks; the per-rank results in rank order.
    `pin_cores`: rank r runs on core r only (needs a core a rank). Raises with the failing rank's
    traceback, or if a rank is silent for `timeout` seconds."""
    cores = sorted(os.sched_getaffinity(0))
    if pin_cores and world_size > len(cores):
        raise ValueError(f"pin_cores needs a core a rank: {world_size} ranks, {len(cores)} cores")
    context = mp.get_context("fork")
    results = context.Queue()
    port = free_port()
    procs = [context.Process(target=_worker, args=(fn, r, world_size, port, threads, results, args,
                                                          cores[r] if pin_cores else None),
                             daemon=True) for r in range(world_size)]
    for proc in procs:
        proc.start()
    collected: dict[int, object] = {}
    try:
        while len(collected) < world_size:
            try:
                rank, status, value = results.get(timeout=timeout)
            except queue_module.Empty:
                missing = sorted(set(range(world_size)) - set(collected))
                raise TimeoutError(f"ranks {missing} did not finish within {timeout}s") from None
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            collected[rank] = value
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return [collected[r] for r in range(world_size)]


def make_config(preset: str, overrides: list[str]):
    """A trident Config from a preset plus overrides, with checkpointing and logging kept quiet."""
    from trident.config import load_config

    quiet = ["checkpoint.save_interval=0", "logging.log_interval=100000", "train.warmup_tokens=0",
             "model.hidden_dropout=0.0", "model.attention_dropout=0.0"]
    return load_config(preset, quiet + list(overrides))
