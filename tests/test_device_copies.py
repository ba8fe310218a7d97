"""Host-device copies on every device this machine has (the CPU, and the GPU where there is one;
benchmarks/gpu.sh runs this file there): model init staged through pinned host buffers gives the
CPU's values bit for bit, and a checkpoint snapshot's non-blocking copies hold the values of the
moment of the save even when training changes the live tensors right after."""
import pytest
import torch

from train_fixtures import tiny_config
from trident.checkpoint.writer import snapshot
from trident.model.gpt import build_model
from trident.parallel.mesh import build_mesh
from trident.parallel.parallelize import parallelize
from trident.parallel.precision import Precision

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_init_on_the_device_equals_the_cpu_init(device, dtype):
    cfg = tiny_config("model.num_layers=2").model
    on_cpu = build_model(cfg, cfg.padded_vocab_size(1), seed=3, dtype=dtype)
    on_device = build_model(cfg, cfg.padded_vocab_size(1), seed=3, device=device, dtype=dtype)
    for (name, expected), (_, param) in zip(on_cpu.named_parameters(), on_device.named_parameters()):
        assert param.device.type == device and torch.equal(param.cpu(), expected), name


@pytest.mark.parametrize("device", DEVICES)
def test_a_snapshot_keeps_the_values_of_the_moment_of_the_save(device):
    model = parallelize(tiny_config("train.precision=bf16"), build_mesh(1, 1, 1), torch.device(device),
                        Precision("bf16", device))
    pieces = [piece for piece in model.state_pieces() if piece.kind != "rng"]
    before = {id(piece): piece.tensor.detach().cpu().clone() for piece in pieces if piece.tensor is not None}
    weights, optim, _, _, copied = snapshot(pieces, model.mesh)
    for piece in pieces:  # training goes on at once: the next update changes every live tensor
        if piece.tensor is not None:
            piece.tensor.data.add_(1.0)
    if copied is not None:
        copied.synchronize()
    assert (copied is None) == (device == "cpu")
    held = list(weights.values()) + list(optim.values())
    assert len(held) == len(before) and all(t.device.type == "cpu" for t in held)
    assert all(t.is_pinned() for t in held) == (device == "cuda")
    assert all(torch.equal(t, expected) for t, expected in zip(held, before.values()))
