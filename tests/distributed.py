"""Run a function on N gloo ranks on 127.0.0.1 (forked processes, one thread each, hard timeout), on the
CPU whatever the machine has."""
from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
import traceback
from datetime import timedelta

from trident.train.launch import free_port


def _worker(fn, rank, world_size, port, results, args, pg_timeout, peers_alive):
    import torch
    import torch.distributed as dist

    # gloo ranks on the CPU, on a GPU machine too: no GPU for torch, and the fixtures' configs say cpu
    # (train_fixtures.tiny_config); LOCAL_RANK would otherwise pick a GPU per rank (issue 59 item 7)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), CUDA_VISIBLE_DEVICES="",
                      TRIDENT_TEST_DEVICE="cpu")
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=pg_timeout))
        results.put((rank, "ok", fn(rank, world_size, *args)))
        if peers_alive:  # with a dead or hung peer a barrier would only wait out the group's timeout
            dist.barrier()
            dist.destroy_process_group()
    except BaseException:  # report any failure to the parent instead of hanging it
        results.put((rank, "error", traceback.format_exc()))


def run_distributed(fn, world_size: int, *args, timeout: float = 120.0, pg_timeout: float = 60.0,
                    expect_dead: tuple = ()) -> list:
    """fn(rank, world_size, *args) on each rank; returns the per-rank results in rank order.
    Raises with the failing rank's traceback, or after `timeout` seconds if any rank hangs.
    Ranks in `expect_dead` are not waited for (fault tests); their result is None."""
    import torch._dynamo  # noqa: F401 (once here, not in every forked rank: torch.utils.checkpoint and torch.compile
    # import it on first use, ~2 s a rank; its import starts no thread, so forking after it is safe)
    context = mp.get_context("fork")
    results = context.Queue()
    port = free_port()
    procs = [context.Process(target=_worker, args=(fn, r, world_size, port, results, args, pg_timeout, not expect_dead),
                             daemon=True)
             for r in range(world_size)]
    for proc in procs:
        proc.start()
    collected: dict[int, object] = {}
    try:
        while len(collected) < world_size - len(expect_dead):
            try:
                rank, status, value = results.get(timeout=timeout)
            except queue_module.Empty:
                missing = sorted(set(range(world_size)) - set(collected))
                raise TimeoutError(f"ranks {missing} did not finish within {timeout}s") from None
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            collected[rank] = value
    finally:
        for rank, proc in enumerate(procs):
            proc.join(timeout=0 if rank in expect_dead else 10)
            if proc.is_alive():
                proc.kill()
    return [collected.get(r) for r in range(world_size)]
