"""Ring attention's blocks on every device this machine has (the CPU, and the GPU where there is one;
benchmarks/gpu.sh runs this file there): a cp4 ring, as threads of one process (tests/ring_fixtures.py),
under bf16 autocast with large scores (q, k of std 3) against SDPA on the whole sequence, forward and
backward, for each block path: torch's CPU flash kernel and the fp32 matmuls on the CPU; CUDA flash
(MHA, GQA), memory-efficient (fp32, GQA in bf16) and the matmuls on the GPU. Everywhere: the CUDA kernels'
calls on meta tensors through every block shape of a ring (signatures, shapes, the dtype each gets), and
which kernel the ring picks for which tensors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ring_fixtures import ring_in_threads
from trident.parallel import context, context_blocks

BF16, FP32 = torch.bfloat16, torch.float32
# (device, forced block path: a kernel name or None for the matmuls, input dtype, key/value heads)
PATHS = [("cpu", "cpu", FP32, 2), ("cpu", None, FP32, 4), ("cpu", None, BF16, 2)]
if torch.cuda.is_available():
    PATHS += [("cuda", "flash", BF16, 4), ("cuda", "flash", BF16, 2), ("cuda", "efficient", FP32, 2),
              ("cuda", "efficient", BF16, 2), ("cuda", None, FP32, 2)]


def _inputs(device: str, dtype, kv_heads: int, seq: int = 256):
    """b1 h4 d64 q, k of std 3 (scores large enough that rounding them to bf16 shows), v, dout."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(1, 4, seq, 64), (1, kv_heads, seq, 64), (1, kv_heads, seq, 64), (1, 4, seq, 64)]
    scales = [3.0, 3.0, 1.0, 1.0]
    return [(torch.randn(shape, generator=gen) * scale).to(device, dtype) for shape, scale in zip(shapes, scales)]


def _sdpa(q, k, v, dout, autocast_dtype=None):
    """SDPA's output and (dq, dk, dv) over the whole sequence: in fp32 from the inputs as they are, or
    as a run without CP computes it (forward under autocast, backward outside)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    if autocast_dtype is None:
        leaves = [t.detach().float().requires_grad_() for t in leaves]
    with torch.autocast(q.device.type, autocast_dtype or BF16, enabled=autocast_dtype is not None):
        out = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=k.size(1) != q.size(1))
    out.backward(dout.to(out.dtype))
    return [out.detach(), *(t.grad for t in leaves)]


def _relative(got, want) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


@pytest.mark.parametrize("device, path, dtype, kv_heads", PATHS,
                         ids=[f"{d}-{p or 'matmul'}-{str(t)[6:]}-kv{h}" for d, p, t, h in PATHS])
def test_ring_blocks_equal_sdpa_under_bf16_autocast(monkeypatch, device, path, dtype, kv_heads):
    monkeypatch.setattr(context, "block_kernel", lambda q: path)
    q, k, v, dout = _inputs(device, dtype, kv_heads)
    exact = _sdpa(q, k, v, dout)
    ring = [_relative(got, want) for got, want in zip(ring_in_threads(q, k, v, dout, 4, BF16), exact)]
    sdpa = [_relative(got, want) for got, want in zip(_sdpa(q, k, v, dout, BF16), exact)]
    print(f"{device} {path or 'matmul'} {dtype} kv{kv_heads}: relative error of out, dq, dk, dv: ring "
          f"{', '.join(f'{e:.1e}' for e in ring)}; SDPA under the same autocast {', '.join(f'{e:.1e}' for e in sdpa)}")
    if dtype == FP32 and path in ("cpu", None):  # fp32 blocks of fp32 inputs: exact up to fp32
        bound = [1e-5] * 4
    else:  # bf16 somewhere (inputs; saved output; a CUDA kernel's inside): as close as SDPA under autocast is
        bound = [2 * error + 2e-3 for error in sdpa]
    assert all(error <= limit for error, limit in zip(ring, bound)), (ring, bound)


@pytest.mark.parametrize("kernel, kv_heads", [("flash", 4), ("flash", 2), ("efficient", 2)])
def test_cuda_kernels_take_the_ring_s_blocks_on_meta_tensors(monkeypatch, kernel, kv_heads):
    """torch's meta functions check each CUDA op's arguments and give its results' shapes and dtypes: a
    cp4 ring (every block shape: causal diagonal, [2c x c], [c x 2c]) runs through them in bf16."""
    seen = []
    kernel_forward = context_blocks.kernel_forward

    def recorded(name, q, *args):
        seen.append((name, q.dtype))
        return kernel_forward(name, q, *args)

    monkeypatch.setattr(context, "block_kernel", lambda q: kernel)
    monkeypatch.setattr(context_blocks, "kernel_forward", recorded)
    q, k, v, dout = (t.to("meta") for t in _inputs("cpu", BF16, kv_heads, seq=80))  # chunks of 10 rows
    out, dq, dk, dv = ring_in_threads(q, k, v, dout, 4)
    assert [(t.shape, t.dtype) for t in (out, dq, dk, dv)] == [(t.shape, BF16) for t in (q, q, k, v)]
    assert set(seen) == {(kernel, BF16)} and len(seen) == 4 * 4  # the input dtype: no fp32 copies


def test_the_ring_picks_its_blocks_by_device_dtype_and_head_size(monkeypatch):
    cpu = torch.zeros(1, 2, 4, 64)
    assert context_blocks.block_kernel(cpu) == "cpu" and context_blocks.block_dtype(cpu.bfloat16(), "cpu") == FP32
    assert context_blocks.block_kernel(cpu.to("meta")) is None  # any other device: the matmuls
    monkeypatch.setattr(context_blocks, "USE_CPU_KERNEL", False)
    assert context_blocks.block_kernel(cpu) is None and context_blocks.block_dtype(cpu.bfloat16(), None) == FP32
    if torch.cuda.is_available():
        gpu = cpu.cuda()
        assert context_blocks.block_kernel(gpu.bfloat16()) == "flash"  # sm80+: every GPU gpu.sh targets
        assert context_blocks.block_kernel(gpu) == "efficient" and context_blocks.block_dtype(gpu, "efficient") == FP32
        assert context_blocks.block_kernel(gpu[..., :12]) is None  # the kernels take head sizes of 8k <= 256
        assert context_blocks.block_dtype(gpu.bfloat16(), "flash") == BF16
