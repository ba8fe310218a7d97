"""One block of ring attention (parallel/context.py): queries [b, hq, m, d] against one rank's keys and
values [b, hkv, n, d], forward (partial output and its fp32 log-sum-exp) and backward (the block's dQ, dK,
dV, from the final output and log-sum-exp), and the merge of a partial into the running fp32 result.

Two implementations of the same math, tested equal: torch's fused attention kernels, which return the
log-sum-exp and take it back in their backward (parallel/context_kernels.py: CPU flash on CPU, flash or
memory-efficient attention on CUDA; never hold a whole score matrix), and plain matmuls in fp32 tiles of
QUERY_TILE query rows (any other device; the definition, in the module docstring of context.py). Query
head i reads key/value head i // (hq / hkv) in both. block_dtype says what a block computes in: fp32,
except in the CUDA kernels (the input dtype, fp32 accumulation inside).
"""
from __future__ import annotations

import math

import torch

from trident.parallel.context_kernels import cuda_kernel, kernel_backward, kernel_forward

USE_CPU_KERNEL = True  # torch's flash kernel on CPU tensors (False: the matmul path, as in its tests)
USE_CUDA_KERNELS = True  # flash / memory-efficient attention on CUDA tensors (False: the matmul path)
QUERY_TILE = 512  # query rows per matmul score tile: its transient fp32 buffer is [b, hq, QUERY_TILE, keys]


def block_kernel(q: torch.Tensor) -> str | None:
    """The fused kernel that computes this ring's blocks ("cpu", "flash", "efficient"), None for matmuls."""
    if q.device.type == "cpu":
        return "cpu" if USE_CPU_KERNEL else None
    if q.device.type == "cuda" and USE_CUDA_KERNELS:
        return cuda_kernel(q)
    return None


def block_dtype(q: torch.Tensor, kernel: str | None) -> torch.dtype:
    """The dtype the ring hands its blocks: the input's in a CUDA kernel (fp32 accumulation inside), else fp32."""
    return q.dtype if kernel in ("flash", "efficient") else torch.float32


def block_tiles(blocks: list[tuple], kernel: str | None):
    """(query rows, key rows, offset) for each (query rows, key rows, diagonal) block. offset is None in a
    fully visible block; in a diagonal (causal) one it is the piece's first row there: row i sees keys up
    to offset + i, so the piece needs no key past its last row. The kernel takes whole blocks (offset 0);
    the matmul path cuts them into tiles of at most QUERY_TILE query rows."""
    for rows, cols, diagonal in blocks:
        if kernel:
            yield rows, cols, 0 if diagonal else None
            continue
        for start in range(rows.start, rows.stop, QUERY_TILE):
            stop = min(start + QUERY_TILE, rows.stop)
            if diagonal:
                yield slice(start, stop), slice(cols.start, cols.stop - (rows.stop - stop)), start - rows.start
            else:
                yield slice(start, stop), cols, None


def block_forward(q, k, v, scale: float, offset: int | None, kernel: str | None):
    """(output [b, hq, m, d], fp32 log-sum-exp [b, hq, m]) of q over this block's keys alone."""
    if kernel:
        return kernel_forward(kernel, q, k, v, scale, offset is not None)
    grouped = _grouped(q, k)
    scores = _scores(grouped, k, scale, offset)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), v.unsqueeze(2))
    return out.reshape(q.shape), lse.reshape(q.shape[:-1])


def block_backward(q, k, v, out, dout, delta, lse, scale: float, offset: int | None, kernel: str | None):
    """(dQ, dK, dV) of this block, from the final output `out`, its log-sum-exp `lse` and
    delta = rowsum(dout * out) (a kernel computes delta itself)."""
    if kernel:
        return kernel_backward(kernel, q, k, v, out, dout, lse, scale, offset is not None)
    grouped, dout5 = _grouped(q, k), _grouped(dout, k)
    probs = torch.exp(_scores(grouped, k, scale, offset) - _grouped(lse.unsqueeze(-1), k))
    dv = torch.matmul(probs.transpose(-1, -2), dout5).sum(2)
    dscores = probs * (torch.matmul(dout5, v.unsqueeze(2).transpose(-1, -2)) - _grouped(delta.unsqueeze(-1), k))
    dq = torch.matmul(dscores, k.unsqueeze(2)) * scale
    dk = torch.matmul(dscores.transpose(-1, -2), grouped).sum(2) * scale
    return dq.reshape(q.shape), dk, dv


def merge(out, lse, rows: slice, block_out, block_lse) -> None:
    """Fold a block's partial (block_out, block_lse) into the running fp32 (out, lse) rows, in place (an
    fp32 block_out is scaled in place too: no temporaries the size of the output)."""
    block_out = block_out.float()  # a CUDA kernel's partial is in the input dtype
    old = lse[..., rows]
    new = torch.logaddexp(old, block_lse)  # finite: every block row sees at least one key
    block_out.mul_(torch.exp(block_lse - new).unsqueeze(-1))
    out[..., rows, :].mul_(torch.exp(old - new).unsqueeze(-1)).add_(block_out)
    lse[..., rows] = new


def _grouped(x, k):
    """[b, hq, m, e] -> [b, hkv, hq / hkv, m, e]: the query heads that share each key/value head."""
    return x.reshape(x.size(0), k.size(1), x.size(1) // k.size(1), *x.shape[2:])


def _scores(grouped, k, scale: float, offset: int | None) -> torch.Tensor:
    """[b, hkv, g, m, n] scores of grouped queries [b, hkv, g, m, d] against k [b, hkv, n, d]."""
    scores = torch.matmul(grouped, k.unsqueeze(2).transpose(-1, -2)) * scale
    if offset is not None:  # a piece of a diagonal block: query i sees keys 0..offset+i
        m, n = scores.shape[-2:]
        hidden = torch.ones(m, n, dtype=torch.bool, device=scores.device).triu(1 + offset)
        scores = scores.masked_fill(hidden, -math.inf)
    return scores
