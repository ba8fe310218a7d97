"""Process start-up: `--nproc N` re-launches the command under torchrun on this machine; a worker
started by torchrun (or a single process) initialises torch.distributed from the environment."""
from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from trident.data.processes import child_processes  # noqa: F401 (public here too)
from trident.train.preemption import STOP_SIGNALS


_PICK = random.SystemRandom()  # from the OS: processes forked from one parent pick differently


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a server started next (a rendezvous store). Picked below the
    kernel's range for automatic ports where it can: a port from that range may be given to any
    outgoing connection before the server binds it (a CI run's rendezvous failed so, EADDRINUSE)."""
    low = _automatic_ports_start()
    for _ in range(100):
        port = _PICK.randint(max(1024, low - 12000), low - 1) if low > 2048 else 0
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # taken: another try
                continue
            return sock.getsockname()[1]
    raise OSError("no free TCP port found on 127.0.0.1")


def _automatic_ports_start() -> int:
    """The first port the kernel hands out automatically (Linux: ip_local_port_range; else 49152, IANA's)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_command(nproc: int, module_args: list[str], max_restarts: int = 0, nnodes: str = "1",
                     rdzv_endpoint: str = "", rdzv_id: str = "", rdzv_conf: str = "") -> list[str]:
    """torchrun's command line: c10d rendezvous always (a restarted round gets fresh store keys; static
    rendezvous reuses stale ones); `nnodes` MIN:MAX makes the job elastic, its agents meeting at
    `rdzv_endpoint` (default: a free local port, one node); `rdzv_conf` is torchrun's --rdzv-conf
    (e.g. keep_alive_interval=1,keep_alive_max_attempt=2: how soon a lost node's place is given up)."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               f"--max-restarts={max_restarts}", f"--nnodes={nnodes}", "--rdzv-backend=c10d",
               f"--rdzv-endpoint={rdzv_endpoint or f'127.0.0.1:{free_port()}'}"]
    if rdzv_id:
        command.append(f"--rdzv-id={rdzv_id}")
    if ":" in nnodes:  # elastic: after a node is lost, the survivors go on once none joined for 5 s
        rdzv_conf = ",".join(filter(None, ["last_call_timeout=5", rdzv_conf]))
    if rdzv_conf:
        command.append(f"--rdzv-conf={rdzv_conf}")
    if _torchrun_has("--signals-to-handle"):  # the ranks handle the stop signals themselves (preemption.py):
        command.append("--signals-to-handle=SIGHUP,SIGQUIT")  # torchrun would SIGKILL them 30 s into a save
    return command + ["-m", "trident", *module_args]


def _torchrun_has(option: str) -> bool:
    """Whether this torch's torchrun takes `option`, read from its source: importing torch to ask would
    cost the launcher seconds, before torchrun itself loads it again."""
    import importlib.util

    spec = importlib.util.find_spec("torch")  # the top-level package: found without being imported
    run_py = Path(spec.submodule_search_locations[0]) / "distributed" / "run.py"
    return f'"{option}"' in run_py.read_text()


def relaunch_with_torchrun(command: list[str], failures: Path | None = None) -> tuple[int, float]:
    """Run torchrun `command` and return (its exit code, the launch time). The launcher's SIGTERM,
    SIGUSR1 and SIGINT go to the ranks themselves, which stop together after saving; torchrun, in a
    session of its own, sees them exit and ends. torchrun (and through it every rank) dies with the
    launcher, so no child outlives it; a second Ctrl-C stops the ranks without saving. With `failures`
    (a local folder, FAILURES_ENV to the ranks) stderr is passed on until a rank leaves a record there:
    the launcher then prints that rank's one line instead of the peers' and torchrun's, which are kept in
    a local file that line names (later_stderr)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # one thread a rank: N ranks share the cores
    env[LAUNCHED_ENV] = "1"
    if failures is not None:
        env[FAILURES_ENV] = str(failures)
    started = time.time()
    proc = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_torchrun_preexec,
                            stderr=subprocess.PIPE if failures is not None else None)
    relay = failures is not None and threading.Thread(target=_pass_stderr, args=(proc, failures), daemon=True)
    relay and relay.start()
    interrupts = [0]

    def forward(signum, frame):
        interrupts[0] += signum == signal.SIGINT
        if interrupts[0] > 1:
            os.killpg(proc.pid, signal.SIGKILL)  # the ranks die with torchrun (PDEATHSIG)
            return
        for pid in child_processes(proc.pid) or [proc.pid]:
            _send(pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        code = proc.wait()
        relay and relay.join(timeout=5)  # the ranks' last lines (they ended with torchrun)
        return code, started
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


LAUNCHED_ENV = "TRIDENT_LAUNCHER"  # set for ranks started by `trident train --nproc`: it prints the stop line
FAILURES_ENV = "TRIDENT_FAILURES"  # a local folder where a rank that met a known failure leaves its line and code


def leave_failure(line: str, code: int) -> bool:
    """Under a launcher: this rank's failure line and exit code in its local folder (False elsewhere)."""
    if FAILURES_ENV not in os.environ:
        return False
    folder, rank = Path(os.environ[FAILURES_ENV]), os.environ.get("RANK", "0")
    record = json.dumps({"line": line, "code": code, "rank": int(rank), "written_at": time.time()})
    (folder / f".rank{rank}").write_text(record)
    (folder / f".rank{rank}").rename(folder / f"rank{rank}.json")  # whole or absent for the launcher
    return True


def first_failure(failures: Path) -> dict | None:
    """The earliest record a rank left in `failures` (the failure the others then met), if any; its line
    says where the stderr that followed it is kept (later_stderr), when there was any."""
    records = [json.loads(path.read_text()) for path in failures.glob("rank*.json")]
    first = min(records, key=lambda record: record["written_at"], default=None)
    kept = later_stderr(failures)
    if first is not None and kept.exists():
        lines = len(kept.read_bytes().splitlines())
        first["line"] += f" (the ranks' and torchrun's stderr after it, {lines} lines, is kept in {kept})"
    return first


def later_stderr(failures: Path) -> Path:
    """The local file that keeps the stderr following a rank's failure record: beside the `failures` folder,
    which the launcher removes once it has read the record."""
    return failures.with_name(f"{failures.name}-stderr.log")


def _pass_stderr(proc: subprocess.Popen, failures: Path) -> None:
    """torchrun's (and its ranks') stderr to the launcher's, until a rank's failure record appears. What
    follows (the peers' lines, torchrun's summary) mostly repeats that failure, which the launcher prints
    once; it goes to later_stderr(failures) instead, so that nothing else said there (another rank's
    unrelated traceback) is lost."""
    fd, kept = proc.stderr.fileno(), None
    try:
        while chunk := os.read(fd, 65536):
            if kept is None and not any(failures.glob("rank*.json")):
                os.write(sys.stderr.fileno(), chunk)
                continue
            kept = kept or open(later_stderr(failures), "ab")  # noqa: SIM115 - open until the stream ends
            kept.write(chunk)
    finally:
        kept and kept.close()


def _torchrun_preexec() -> None:
    """In torchrun before exec: die with the launcher (its ranks then die with it); ignore the stop
    signals, which Slurm sends every process of a job step and which the ranks handle themselves."""
    die_with_parent(signal.SIGKILL)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _default_stop_signals() -> None:
    """A rank inherits the stop signals ignored from its torchrun (see _torchrun_preexec): give them back
    their default meaning unless this process handles them itself (`trident train` does, from start)."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Linux: receive `sig` when the parent process dies (no orphaned rank keeps a job's GPUs busy)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return  # not Linux: processes may outlive their launcher
    PR_SET_PDEATHSIG = 1
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0 and os.getppid() == 1:
        os.kill(os.getpid(), sig)  # the parent was gone before the request took effect


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return  # it ended on its own meanwhile


# What torch's NCCL backend needs from the environment, on every launch path (torchrun, Slurm, a test's
# ranks), unless the environment says otherwise: a failed or timed-out collective aborts its communicator
# and raises in the rank (2: the rank names the failure and dumps its flight recorder instead of being
# torn down); torch's flight recorder keeps the last collectives (NCCL and gloo) and NCCL's dumps them
# on a timeout (its buffer: TORCH_FR_BUFFER_SIZE, TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.6). launch/slurm.py
# exports the same.
NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_BUFFER_SIZE": "2000",
            "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}
MIXED_BACKEND = "cpu:gloo,cuda:nccl"  # NCCL for tensors on the GPU; gloo for objects, barriers and host tensors


def init_distributed(backend: str = "auto", timeout_s: int = 600, device: str = "auto") -> None:
    """Join the process group described by torchrun's environment (nothing to do for one process).
    `device` is the run's (train.device: auto, cpu, cuda): on a GPU the rank's own GPU is set before
    the first collective, the default group is cpu:gloo,cuda:nccl (MIXED_BACKEND) bound to that GPU
    (device_id); backend auto is NCCL there and gloo on the CPU, nccl means MIXED_BACKEND."""
    import torch.distributed as dist  # here, not at the top: the launcher itself never loads torch (seconds a start)

    if under_torchrun():
        die_with_parent()  # torchrun gone (a lost node, a killed launcher): this rank goes too
        _default_stop_signals()
    if dist.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    backend, device_id = _backend_and_device(backend, device)
    for key, value in NCCL_ENV.items():
        os.environ.setdefault(key, value)
    timeout = timedelta(seconds=timeout_s)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Every process group's keys go under this attempt's prefix: after a torchrun restart the
    # store still holds the dead attempt's addresses, which new groups would otherwise read.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=rank == 0 and not agent_store, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(backend=backend, store=dist.PrefixStore(f"trident/attempt{attempt}/", store),
                            rank=rank, world_size=world, timeout=timeout, device_id=device_id)


def join_serving_group(device: str, timeout_s: int = 600) -> None:
    """init_distributed for the commands that serve a model on `device` (serve, eval, generate):
    gloo on the CPU, else the mixed group bound to that very device (`cuda:1` binds GPU 1, where the
    model is loaded; `cuda` this rank's own)."""
    init_distributed("gloo" if device == "cpu" else "nccl", timeout_s, device=device)


def _backend_and_device(backend: str, device: str):
    """(init_process_group's backend, its device_id: this rank's GPU, set as current, or None)."""
    import torch

    from trident.config import ConfigError
    from trident.parallel.mesh import rank_device

    if backend == "gloo":
        return "gloo", None
    wanted = "cuda" if backend == "nccl" and device == "auto" else device
    target = rank_device(wanted)
    if target.type != "cuda":
        if backend == "nccl":
            raise ConfigError(f"parallel.backend=nccl needs a CUDA device, got train.device={device}")
        return "gloo", None
    if target.index is None:  # train.device=cuda:N names its GPU; plain cuda is LOCAL_RANK's (rank_device)
        target = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(target)  # before the first collective: NCCL's communicator lives on it
    return MIXED_BACKEND, target


def shutdown_distributed(wait: bool = True) -> None:
    """Leave the process group, after a barrier unless every rank is known to be leaving already."""
    import torch.distributed as dist

    if dist.is_initialized():
        if wait:
            dist.barrier()
        dist.destroy_process_group()
