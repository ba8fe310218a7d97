import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")
if os.environ.get("TRIDENT_TEST_DEVICE", "cpu") == "cpu":  # the suite means the CPU, on a GPU machine too: no GPU for
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # torch here nor in what it starts (benchmarks/gpu.sh opts in with auto)


def pytest_configure(config):
    """Each xdist worker takes a core of its own (_own_core). The session's first process (xdist's
    controller, or pytest alone) starts kernel_warmup.py in idle CPU time only: dedup's compiled
    kernels are built while tests wait, not inside a test."""
    if hasattr(config, "workerinput"):
        _own_core(config.workerinput)
        return
    _compile_trident()
    config.kernel_warmup = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("kernel_warmup.py"))], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=_idle_priority)


def _compile_trident() -> None:
    """trident's bytecode, as pip compiles an installed package's: an editable install has none, and
    where PYTHONDONTWRITEBYTECODE is set (this machine) every interpreter the tests start (ranks,
    launchers, CLI runs: about 45) would compile trident from source again (~0.5 s for all of it)."""
    import compileall

    import trident

    compileall.compile_dir(Path(trident.__file__).parent, quiet=1)


def _own_core(workerinput: dict) -> None:
    """Each test worker (and every rank, launcher and server it starts) on a core of its own, when
    there are as many cores as workers: gloo's collectives cross several threads per rank, and on
    this VM a wake-up on another core costs as much as the collective (2 ranks on one core: all_reduce
    1.2 ms, barrier 0.8 ms; on both cores 1.4-2.9 ms and 0.7-1.8 ms), and two workers' ranks stop
    trading places on both cores."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cores and len(cores) == workerinput["workercount"]:
        os.sched_setaffinity(0, {cores[int(workerinput["workerid"].removeprefix("gw"))]})


def _idle_priority():
    """SCHED_IDLE where Linux has it: even at nice 19 a builder delays the latency-bound gloo tests'
    wake-ups (measured: +15 s on the Llama layouts test); an idle-class process runs only on a free core."""
    if hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.nice(19)


def pytest_collection_modifyitems(items):
    """The tests that use the session's Ray cluster run first: pytest-xdist's `--dist load` hands each
    worker a first batch of consecutive tests, so all of them run on the one worker that starts the
    cluster (~10 s), where otherwise both workers often started one."""
    items.sort(key=lambda item: "ray_cluster" not in getattr(item, "fixturenames", ()))


def pytest_unconfigure(config):
    warmup = getattr(config, "kernel_warmup", None)
    if warmup is not None and warmup.poll() is None:  # the session is over: nothing waits for it now
        os.killpg(warmup.pid, signal.SIGTERM)
        warmup.wait()


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)
    yield


_TRAINED = {}  # one trained checkpoint for the whole session (per xdist worker)


@pytest.fixture(params=["plain", "compiled"])
def loop_route(request, monkeypatch):
    """The test runs twice: the data index builders' loops as plain Python, then compiled (trident
    picks by a loop's length; both routes must give the same bits)."""
    from trident.data import compiled

    monkeypatch.setattr(compiled, "PLAIN_UP_TO", 10**18 if request.param == "plain" else -1)
    return request.param


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory):
    """(checkpoint path, tokenizer, sample text) of a 2-layer model trained for 40 steps on docstrings."""
    if "result" not in _TRAINED:
        _TRAINED["result"] = _train_checkpoint(tmp_path_factory.mktemp("gen_ckpt"))
    return _TRAINED["result"]


@pytest.fixture(scope="session")
def trained_llama_checkpoint(tmp_path_factory):
    """As trained_checkpoint, for the Llama-style preset (RoPE, RMSNorm, SwiGLU, GQA, untied, no biases)."""
    if "llama" not in _TRAINED:
        _TRAINED["llama"] = _train_checkpoint(tmp_path_factory.mktemp("llama_ckpt"), "llama-tiny")
    return _TRAINED["llama"]


def _train_checkpoint(root, preset="tiny"):
    import numpy as np

    from train_fixtures import Windows, stdlib_text
    from trident.config import load_config
    from trident.data.tokenizer import train_tokenizer
    from trident.train.trainer import Trainer

    text = stdlib_text()
    (root / "corpus.txt").write_text(text)
    tokenizer = train_tokenizer([root / "corpus.txt"], vocab_size=400, out=root / "tokenizer.json")
    config = load_config(preset, ["train.steps=40", "logging.log_interval=1000", "train.lr=1e-2",
                                  "model.make_vocab_size_divisible_by=64"])
    ids = np.array(tokenizer.encode(text), dtype=np.int64)
    trainer = Trainer(config, root / "run", datasets=(Windows(ids, config.model.seq_length), None),
                      vocab_size=tokenizer.vocab_size, log=lambda *a: None)
    trainer.tokenizer_file = root / "tokenizer.json"  # ship the tokenizer inside the checkpoint
    trainer.train()
    assert config.model.padded_vocab_size() > tokenizer.vocab_size  # the padding the tests rely on
    return trainer.checkpoint_root, tokenizer, text


@pytest.fixture(scope="session")
def s3():
    """A local S3 server (moto) for this test process; `s3.url(name)` names a prefix in its bucket."""
    from s3_fixtures import LocalS3

    server = LocalS3().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chat_server(tmp_path_factory):
    """One `trident serve` (serve_fixtures.Server) for every serving test module of this test process, on
    a checkpoint with a Hugging Face chat template; `checkpoint` and `tokenizer` are its own."""
    from serve_fixtures import Server, chat_checkpoint

    checkpoint, tokenizer = chat_checkpoint(tmp_path_factory.mktemp("chat_server"))
    server = Server(checkpoint, "--max-batch", "16", "--model-name", "tiny")
    server.tokenizer = tokenizer
    try:
        yield server
        assert server.stop() == 0, server.output()[-3000:]
    finally:
        server.kill()


@pytest.fixture(scope="session")
def ray_cluster(s3):
    """A local Ray cluster of 2 CPUs for every Ray test of this test process, started once (a start costs
    ~5 s of CPU and ~15 s here) by trident's own RayExecutor; executors made while it runs join it, as
    `trident curate --executor ray` joins a running cluster. It starts after the local S3 so that its
    workers inherit the endpoint; at the end the executor that started it must shut it down."""
    import ray

    from trident.curate.run.executors import RayExecutor

    assert not ray.is_initialized()
    starter = RayExecutor(workers=2, progress=False)
    yield starter
    starter.close()
    assert not ray.is_initialized(), "RayExecutor.close left up the local cluster it started"
