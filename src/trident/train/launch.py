"""Process start-up: `--nproc N` re-launches the command under torchrun on this machine; a worker
started by torchrun (or a single process) initialises torch.distributed from the environment."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def relaunch_with_torchrun(nproc: int, module_args: list[str], max_restarts: int = 0) -> int:
    """Run `python -m trident <module_args>` as `nproc` local processes; returns the exit code.
    With max_restarts, torchrun restarts every rank after a failure (resume with checkpoint.load=auto)."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               f"--max-restarts={max_restarts}",
               # c10d rendezvous: a restarted round gets fresh store keys (static rendezvous reuses stale ones)
               "--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
               "-m", "trident", *module_args]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # one thread a rank: N ranks share the cores
    return subprocess.call(command, env=env)


def init_distributed(backend: str = "auto", timeout_s: int = 600) -> None:
    """Join the process group described by torchrun's environment (nothing to do for one process)."""
    if dist.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    timeout = timedelta(seconds=timeout_s)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Every process group's keys go under this attempt's prefix: after a torchrun restart the
    # store still holds the dead attempt's addresses, which new groups would otherwise read.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=rank == 0 and not agent_store, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(backend=backend, store=dist.PrefixStore(f"trident/attempt{attempt}/", store),
                            rank=rank, world_size=world, timeout=timeout)


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def chaos_kill_point(rank: int, step: int) -> None:
    """Fault drill: TRIDENT_CHAOS_KILL="RANK:STEP" SIGKILLs that rank before that step, on a job's
    first attempt only (torchrun's restart count 0), to rehearse crash-and-resume for real."""
    spec = os.environ.get("TRIDENT_CHAOS_KILL")
    if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    kill_rank, kill_step = (int(part) for part in spec.split(":"))
    if rank == kill_rank and step == kill_step:
        os.kill(os.getpid(), 9)
