"""What the test suite does on a GPU machine, checked on this CPU one (issue 59 item 7): the suite hides
GPUs from torch unless benchmarks/gpu.sh asks for them, and the forked gloo ranks of tests/distributed.py
and the runs train_fixtures starts mean the CPU and say so, so a GPU
machine (where torch.cuda.is_available() and LOCAL_RANK would pick a GPU per rank: an invalid device
ordinal on one GPU, CUDA tensors gloo cannot send) runs the suite unchanged."""
from __future__ import annotations

import os
from pathlib import Path

from distributed import run_distributed
from train_fixtures import tiny_config, train_command


def _what_a_rank_sees(rank, world):
    import torch

    from trident.parallel.mesh import rank_device

    torch.cuda.is_available = lambda: True  # as on a GPU machine (a forked rank: the change dies with it)
    config = tiny_config()
    return os.environ.get("CUDA_VISIBLE_DEVICES"), config.train.device, str(rank_device(config.train.device))


def test_forked_ranks_run_on_the_cpu_on_a_gpu_machine_too():
    assert run_distributed(_what_a_rank_sees, 2) == [("", "cpu", "cpu")] * 2


def test_the_suite_hides_gpus_unless_asked_for_them():
    """tests/conftest.py: no GPU for torch in the test processes nor anything they start (runs under
    `--nproc`, servers), unless TRIDENT_TEST_DEVICE=auto (benchmarks/gpu.sh's GPU steps)."""
    asked = os.environ.get("TRIDENT_TEST_DEVICE", "cpu") != "cpu"
    assert asked or os.environ.get("CUDA_VISIBLE_DEVICES") == ""


def test_fixture_configs_and_runs_say_cpu(monkeypatch):
    monkeypatch.delenv("TRIDENT_TEST_DEVICE", raising=False)
    assert tiny_config().train.device == "cpu"
    assert "train.device=cpu" in train_command(Path("corpus"), Path("out"), nproc=2)
    monkeypatch.setenv("TRIDENT_TEST_DEVICE", "auto")  # benchmarks/gpu.sh's single-process tests
    assert tiny_config().train.device == "auto"
