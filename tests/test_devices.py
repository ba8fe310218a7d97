"""Every device this machine has (the CPU, and the GPU where there is one): the model through
`parallelize` on one process against the CPU in fp32 and bf16, a flash/memory-efficient attention
kernel, KV-cached greedy generation, a checkpoint round trip through the Trainer, and the fused
AdamW kernel (against torch.optim.AdamW(fused=True), decayed and undecayed parameters alike)."""
import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.infer.generate import generate_tokens
from trident.parallel.data import flat_buffers
from trident.parallel.mesh import build_mesh
from trident.parallel.optim import no_weight_decay
from trident.parallel.parallelize import parallelize
from trident.parallel.precision import Precision
from trident.parallel.zero import DistributedAdam

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CHECKED = ["embedding.word.weight", "blocks.0.attention.qkv.weight", "blocks.1.mlp.fc2.bias", "final_norm.weight"]
DATA = RandomTokens(32)


def one_process(device: str, precision: str, optimizer: bool = True):
    config = tiny_config(f"train.precision={precision}")
    return parallelize(config, build_mesh(1, 1, 1), torch.device(device), Precision(precision, device), optimizer)


def loss_and_grads(device: str, precision: str) -> tuple[float, dict[str, torch.Tensor]]:
    """One forward + backward of two samples; the loss and a few fp32 gradients, on the CPU."""
    model = one_process(device, precision)
    sample = torch.from_numpy(np.stack([DATA[0], DATA[1]])).to(device)
    loss = model.forward_backward([(sample[:, :-1], sample[:, 1:])], 1)
    return loss.item(), {name: p.main_grad.cpu().clone() for name, p in model.named_params if name in CHECKED}


def relative_error(value: torch.Tensor, expected: torch.Tensor) -> float:
    return ((value - expected).norm() / expected.norm()).item()


@pytest.fixture(scope="module")
def cpu_fp32():
    return loss_and_grads("cpu", "fp32")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision,tolerance", [("fp32", 1e-5), ("bf16", 5e-2)])
def test_forward_backward_matches_the_cpu(device, precision, tolerance, cpu_fp32):
    expected_loss, expected_grads = cpu_fp32
    loss, grads = loss_and_grads(device, precision)
    assert loss == pytest.approx(expected_loss, rel=tolerance)
    assert grads.keys() == expected_grads.keys() == set(CHECKED)
    for name, grad in grads.items():
        assert relative_error(grad, expected_grads[name]) < tolerance, name


@pytest.mark.parametrize("device", DEVICES)
def test_attention_runs_a_flash_or_memory_efficient_kernel(device):
    """With the math fallback disabled, a bf16 forward + backward still runs (on the CPU, torch's
    CPU flash kernel; on CUDA, flash or memory-efficient attention)."""
    model = one_process(device, "bf16")
    sample = torch.from_numpy(np.stack([DATA[0], DATA[1]])).to(device)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        loss = model.forward_backward([(sample[:, :-1], sample[:, 1:])], 1)
    assert torch.isfinite(loss) and model.grad_buffers.grads.abs().sum() > 0


def greedy(model, prompt: list[int], steps: int, cached: bool) -> list[int]:
    if cached:
        return generate_tokens(model, prompt, steps, VOCAB, greedy=True, stop_at_eod=False).new_ids
    ids, device = list(prompt), next(model.parameters()).device
    with torch.no_grad():  # the whole sequence recomputed for every new token
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids], device=device))[0, -1, :VOCAB].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("device", DEVICES)
def test_kv_cached_greedy_generation_matches_recomputation_and_the_cpu(device):
    prompt = [int(t) for t in DATA[2][:6]]
    on_cpu = greedy(one_process("cpu", "fp32", optimizer=False).chunks[0].eval(), prompt, 20, cached=True)
    model = one_process(device, "fp32", optimizer=False).chunks[0].eval()
    assert greedy(model, prompt, 20, cached=True) == greedy(model, prompt, 20, cached=False) == on_cpu
    assert len(set(on_cpu)) > 3  # not a degenerate repetition


def make_trainer(device: str, precision: str, root, name: str, load: str = ""):
    from trident.train.trainer import Trainer

    config = tiny_config(f"train.device={device}", f"train.precision={precision}", f"checkpoint.dir={root}/ckpt",
                         f"checkpoint.load={load}")
    return Trainer(config, root / name, datasets=(DATA, None), vocab_size=VOCAB, log=lambda *a: None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_checkpoint_round_trip_on_the_device(device, precision, tmp_path):
    trainer = make_trainer(device, precision, tmp_path, "a")
    trainer.train_step()
    path = trainer.save()
    trainer.writer.wait()
    fresh = make_trainer(device, precision, tmp_path, "b", load=str(path))
    assert (fresh.step, fresh.model.optimizer.steps) == (1, 1)
    for (name, saved), (_, loaded) in zip(trainer.model.named_params, fresh.model.named_params):
        assert loaded.device.type == device and torch.equal(loaded, saved), name
    before, after = trainer.model.optimizer, fresh.model.optimizer
    for kind in ("master", "exp_avg", "exp_avg_sq"):
        for saved, loaded in zip(getattr(before, kind), getattr(after, kind)):
            assert torch.equal(loaded, saved), kind
    assert fresh.train_step()["loss"] == trainer.train_step()["loss"]  # and both continue alike


def adamw_pair(device: str, fused: bool):
    """Interleaved weights (decayed) and biases/norms (not), as flat buffers + DistributedAdam, and
    the same tensors under torch.optim.AdamW(fused=True) with a decay and a no-decay group."""
    torch.manual_seed(0)
    shapes = {"a.weight": (16, 8), "a.bias": (16,), "norm.weight": (8,), "b.weight": (8, 16), "b.bias": (8,)}
    named = [(name, torch.nn.Parameter(torch.randn(shape, device=device))) for name, shape in shapes.items()]
    reference = {name: torch.nn.Parameter(param.detach().clone()) for name, param in named}
    decay = {id(p): not no_weight_decay(n, p) for n, p in named}
    ours = DistributedAdam(*flat_buffers(named, None, 1, 0, 2**20), decay, {id(p): True for _, p in named}, 1e-2,
                           (0.9, 0.95), 1e-8, 0.1, fused)
    groups = [{"params": [reference[n] for n, p in named if decay[id(p)]], "weight_decay": 0.1},
              {"params": [reference[n] for n, p in named if not decay[id(p)]], "weight_decay": 0.0}]
    theirs = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, fused=True)
    return named, ours, reference, theirs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused,tolerance", [(True, 1e-6), (False, 1e-5)])
def test_adamw_equals_torch_fused_adamw(device, fused, tolerance):
    named, ours, reference, theirs = adamw_pair(device, fused)
    assert ours.kernel == ("fused" if fused else "foreach") and len(ours.decay_segments[0]) == 2
    for step, lr in enumerate([1e-2, 5e-3, 2e-3]):
        for name, param in named:
            grad = torch.randn(param.shape, device=device)
            param.main_grad.copy_(grad)
            reference[name].grad = grad.clone()
        for group in theirs.param_groups:
            group["lr"] = lr
        ours.step(lr)
        theirs.step()
    for name, param in named:
        torch.testing.assert_close(param.detach(), reference[name].detach(), rtol=tolerance, atol=tolerance,
                                   msg=name)
        state = theirs.state[reference[name]]
        start, end = ours.layout.param_range(param)
        torch.testing.assert_close(ours.exp_avg_sq[0][start:end], state["exp_avg_sq"].flatten(), rtol=tolerance,
                                   atol=1e-12, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_the_trainer_runs_the_fused_adamw_kernel(device):
    assert one_process(device, "bf16").optimizer.kernel == "fused"
