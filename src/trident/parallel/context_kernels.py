"""torch's fused attention kernels as ring-attention blocks (parallel/context_blocks.py): each returns a
block's output and log-sum-exp and takes the final log-sum-exp back in its backward, as torch's own ring
attention calls them (torch.distributed.tensor.experimental, _context_parallel/_attention.py).

  "cpu"       torch's CPU flash kernel; the ring hands it fp32 q, k, v.
  "flash"     CUDA flash attention (FlashAttention-2): fp16/bf16 q, k, v, head size a multiple of 8 up
              to 256, sm80 or newer; reads grouped key/value heads as they are.
  "efficient" CUDA memory-efficient attention: any float dtype, fp32 included, one key/value head per
              query head (grouped ones are repeated, their gradients summed back).

The CUDA kernels take the input dtype (the ring does not upcast for them) and accumulate in fp32
inside; their log-sum-exp is fp32. They never ran in the test suite (no GPU there): benchmarks/gpu.sh
checks them against SDPA under bf16 autocast (docs/gpu-checks.md).
"""
from __future__ import annotations

import torch

_CPU = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward)
_FLASH = (torch.ops.aten._scaled_dot_product_flash_attention,
          torch.ops.aten._scaled_dot_product_flash_attention_backward)
_EFFICIENT = (torch.ops.aten._scaled_dot_product_efficient_attention,
              torch.ops.aten._scaled_dot_product_efficient_attention_backward)
_LSE_ROWS = 32  # the efficient kernel pads its log-sum-exp rows to a multiple of 32 (not on ROCm)


def cuda_kernel(q: torch.Tensor) -> str | None:
    """"flash" or "efficient" for CUDA queries [b, h, m, d] the kernels take; None: use matmuls."""
    head = q.size(-1)
    if head % 8 or head > 256:
        return None
    half = q.dtype in (torch.float16, torch.bfloat16)
    return "flash" if half and torch.cuda.get_device_capability(q.device)[0] >= 8 else "efficient"


def kernel_forward(kernel: str, q, k, v, scale: float, causal: bool):
    """(output [b, hq, m, d] in q's dtype, fp32 log-sum-exp [b, hq, m]) of q over keys k, v [b, hkv, n, d];
    causal: the top-left causal mask of a square block."""
    if kernel == "cpu":
        return _CPU[0](q, k, v, 0.0, causal, scale=scale)
    if kernel == "flash":
        out, lse, *_ = _FLASH[0](q, k, v, 0.0, causal, False, scale=scale)
        return out, lse
    out, lse, *_ = _EFFICIENT[0](q, _repeat(k, q), _repeat(v, q), None, True, 0.0, causal, scale=scale)
    return out, lse[..., :q.size(2)]


def kernel_backward(kernel: str, q, k, v, out, dout, lse, scale: float, causal: bool):
    """(dQ, dK, dV) of the block from the final output `out` and log-sum-exp `lse` (q's dtype, fp32)."""
    lse = lse.contiguous()  # a row slice of the ring's lse: the CUDA kernels read it by pointer
    if kernel == "cpu":
        return _CPU[1](dout, q, k, v, out, lse, 0.0, causal, scale=scale)
    if kernel == "flash":
        state = torch.empty(2, dtype=torch.uint64, device=q.device)  # dropout's RNG state: unread at p = 0
        unused = torch.empty((), dtype=torch.uint64, device=q.device)
        return _FLASH[1](dout, q, k, v, out, lse, None, None, q.size(2), k.size(2), 0.0, causal, state, unused,
                         scale=scale)
    if torch.version.hip is None:  # the shape the forward returned
        lse = torch.nn.functional.pad(lse, (0, -lse.size(-1) % _LSE_ROWS))
    seed = torch.empty((), dtype=torch.int64, device=q.device)  # unread at p = 0
    dq, dk, dv, _ = _EFFICIENT[1](dout, q, _repeat(k, q), _repeat(v, q), None, out, lse, seed, seed, 0.0,
                                  [True, True, True, False], causal, scale=scale)
    return dq, _sum_groups(dk, k), _sum_groups(dv, k)


def _repeat(kv, q):
    """Key/value heads [b, hkv, n, d] repeated to q's heads (head i of q reads i // (hq / hkv))."""
    return kv if kv.size(1) == q.size(1) else kv.repeat_interleave(q.size(1) // kv.size(1), dim=1)


def _sum_groups(grad, kv):
    """A repeated head's gradient [b, hq, n, d] summed back to kv's heads [b, hkv, n, d] (fp32)."""
    if grad.size(1) == kv.size(1):
        return grad
    return grad.float().reshape(kv.size(0), kv.size(1), -1, *grad.shape[2:]).sum(2)
