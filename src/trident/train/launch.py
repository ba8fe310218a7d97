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


def relaunch_with_torchrun(nproc: int, module_args: list[str]) -> int:
    """Run `python -m trident <module_args>` as `nproc` local processes; returns the exit code."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "trident", *module_args]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # one thread a rank: N ranks share the cores
    return subprocess.call(command, env=env)


def init_distributed(backend: str = "auto", timeout_s: int = 600) -> None:
    """Join the process group described by torchrun's environment (nothing to do for one process)."""
    if dist.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
