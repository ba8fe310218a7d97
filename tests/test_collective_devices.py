"""Which backend carries what (issue 59 item 2). On a GPU the default group is cpu:gloo,cuda:nccl bound to
the rank's GPU (device_id), that GPU set before the first collective, NCCL's error handling and
dump-on-timeout in the environment (checked here with CUDA simulated: no GPU on this machine); a CPU
run on a GPU machine stays on gloo. On gloo, an audit of every collective a training step issues
(cp2 at ZeRO-3, a checkpoint save): tensors on the run's device, objects and barriers through a
group with a CPU backend. `trident generate --nproc`'s audit is in test_generate_parallel.py."""
from __future__ import annotations

import os

import pytest
import torch

from collective_fixtures import audit_collectives, misplaced
from distributed import run_distributed
from train_fixtures import tiny_config, trained
from trident.train import launch
from trident.train.launch import MIXED_BACKEND, NCCL_ENV, init_distributed, join_serving_group


@pytest.fixture
def gpu_machine(monkeypatch):
    """One simulated GPU, a world of two without torchrun's LOCAL_RANK, and init_process_group recorded:
    returns the list of ("set_device", device) and ("init", kwargs) in call order."""
    import torch.distributed as dist

    events = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: events.append(("set_device", torch.device("cuda", 0)
                                                                               if device == 0 else device)))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "TCPStore", lambda *args, **kwargs: "store")
    monkeypatch.setattr(dist, "PrefixStore", lambda prefix, store: store)
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: events.append(("init", kwargs)))
    monkeypatch.setattr(launch, "under_torchrun", lambda: False)
    for key, value in {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(key, value)
    for key in NCCL_ENV:
        monkeypatch.setenv(key, "unset")
        monkeypatch.delenv(key)  # restored (removed) after the test, whatever init_distributed sets
    return events


def test_a_gpu_run_binds_its_gpu_before_the_mixed_group(gpu_machine):
    init_distributed("auto", 30, "auto")
    assert [kind for kind, _ in gpu_machine] == ["set_device", "set_device", "init"]  # the GPU first
    init = gpu_machine[-1][1]
    assert init["backend"] == MIXED_BACKEND == "cpu:gloo,cuda:nccl" and init["device_id"] == torch.device("cuda", 0)
    assert all(os.environ[key] == value for key, value in NCCL_ENV.items())
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2" and os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_nccl_asked_for_gets_the_mixed_group_and_the_environment_wins(gpu_machine, monkeypatch):
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # set by the user: kept
    init_distributed("nccl", 30)
    assert gpu_machine[-1][1]["backend"] == MIXED_BACKEND and os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_a_cpu_run_on_a_gpu_machine_stays_on_gloo(gpu_machine):
    init_distributed("auto", 30, "cpu")
    assert gpu_machine == [("init", gpu_machine[0][1])] and gpu_machine[0][1]["backend"] == "gloo"
    assert gpu_machine[0][1]["device_id"] is None
    with pytest.raises(ValueError, match="parallel.backend=nccl needs a CUDA device"):
        init_distributed("nccl", 30, "cpu")


def test_serve_eval_and_generate_bind_the_gpu_their_model_is_on(gpu_machine):
    join_serving_group("cuda:1")  # --device cuda:1: the model's GPU, not LOCAL_RANK's
    assert gpu_machine == [("set_device", torch.device("cuda", 1)), ("init", gpu_machine[-1][1])]
    assert gpu_machine[-1][1]["device_id"] == torch.device("cuda", 1) and gpu_machine[-1][1]["backend"] == MIXED_BACKEND
    gpu_machine.clear()
    join_serving_group("cpu")
    assert gpu_machine[-1][1]["backend"] == "gloo" and gpu_machine[-1][1]["device_id"] is None


def test_more_local_ranks_than_gpus_is_refused_by_name(gpu_machine, monkeypatch):
    from trident.parallel.mesh import rank_device

    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match="local rank 1 but this machine has 1 GPU"):
        rank_device("auto")


def _audited_step(rank, world, out):
    calls = audit_collectives()
    config = tiny_config("train.global_batch_size=4", "train.micro_batch_size=2", "parallel.cp=2",
                         "parallel.zero_stage=3", "train.steps=1", "checkpoint.save_interval=1",
                         f"checkpoint.dir={out}/ckpt")
    trainer, _ = trained(config, f"{out}/r{rank}")
    trainer.writer.wait()
    return calls, str(trainer.device)


@pytest.mark.timeout(120)
def test_every_collective_of_a_training_step_passes_tensors_on_the_run_device(tmp_path):
    for calls, device in run_distributed(_audited_step, 2, str(tmp_path), timeout=110):
        names = {call["call"] for call in calls}
        assert {"batch_isend_irecv", "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"} <= names
        assert names & {"broadcast_object_list", "all_gather_object"}  # the save's objects were audited too
        assert misplaced(calls, device) == []
