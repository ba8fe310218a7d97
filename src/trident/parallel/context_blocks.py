"""One block of ring attention (parallel/context.py): queries [b, hq, m, d] against one rank's keys and
values [b, hkv, n, d], all fp32, forward (partial output and its log-sum-exp) and backward (the block's
dQ, dK, dV, from the final output and log-sum-exp), and the merge of a partial into the running result.

Two implementations of the same math, tested equal: torch's CPU flash-attention kernel, which returns the
log-sum-exp and takes it back in its backward (used on CPU: fast, never holds a whole score matrix), and
plain matmuls in tiles of QUERY_TILE query rows (any device; the definition, in the module docstring
of context.py). Query head i reads key/value head i // (hq / hkv) in both.
"""
from __future__ import annotations

import math

import torch

USE_CPU_KERNEL = True  # torch's flash kernel on CPU tensors; the matmul path elsewhere (and in its tests)
QUERY_TILE = 512  # query rows per matmul score tile: its transient fp32 buffer is [b, hq, QUERY_TILE, keys]
_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def uses_kernel(q: torch.Tensor) -> bool:
    return USE_CPU_KERNEL and q.device.type == "cpu"


def block_tiles(blocks: list[tuple], kernel: bool):
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


def block_forward(q, k, v, scale: float, offset: int | None, kernel: bool):
    """(output [b, hq, m, d], log-sum-exp [b, hq, m]) of q over this block's keys alone."""
    if kernel:
        return _FORWARD(q, k, v, 0.0, offset is not None, scale=scale)
    grouped = _grouped(q, k)
    scores = _scores(grouped, k, scale, offset)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), v.unsqueeze(2))
    return out.reshape(q.shape), lse.reshape(q.shape[:-1])


def block_backward(q, k, v, out, dout, delta, lse, scale: float, offset: int | None, kernel: bool):
    """(dQ, dK, dV) of this block, from the final output `out`, its log-sum-exp `lse` and
    delta = rowsum(dout * out) (the kernel computes delta itself)."""
    if kernel:
        return _BACKWARD(dout, q, k, v, out, lse, 0.0, offset is not None, scale=scale)
    grouped, dout5 = _grouped(q, k), _grouped(dout, k)
    probs = torch.exp(_scores(grouped, k, scale, offset) - _grouped(lse.unsqueeze(-1), k))
    dv = torch.matmul(probs.transpose(-1, -2), dout5).sum(2)
    dscores = probs * (torch.matmul(dout5, v.unsqueeze(2).transpose(-1, -2)) - _grouped(delta.unsqueeze(-1), k))
    dq = torch.matmul(dscores, k.unsqueeze(2)) * scale
    dk = torch.matmul(dscores.transpose(-1, -2), grouped).sum(2) * scale
    return dq.reshape(q.shape), dk, dv


def merge(out, lse, rows: slice, block_out, block_lse) -> None:
    """Fold a block's partial (block_out, block_lse) into the running (out, lse) rows, in place (block_out
    is scaled in place too: no temporaries the size of the output)."""
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
