"""Deferred weight gradients for zero-bubble pipeline schedules (pipeline/zero_bubble.py).

Inside `deferring_weight_grads(queue)` the tensor-parallel linear layers record themselves so that
their backward computes only the input (and bias) gradient, the part the previous pipeline stage
waits for, and appends (weight, input, output gradient) to `queue`. `flush(queue)` later computes
the weight gradients (one GEMM each, as the usual backward would) and accumulates them through
autograd, so every post-accumulate-grad hook (trident's fp32 accumulation and its data-parallel
bucket counting) fires exactly as with a plain backward. Outside the context, or with gradients off,
`linear` is `F.linear`.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import torch
import torch.nn.functional as F

_QUEUE: contextvars.ContextVar = contextvars.ContextVar("trident_weight_grad_queue", default=None)


@contextmanager
def deferring_weight_grads(queue: list):
    """Linear layers run in this block defer their weight gradients to `queue` (see flush)."""
    token = _QUEUE.set(queue)
    try:
        yield queue
    finally:
        _QUEUE.reset(token)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, whose weight gradient is deferred inside deferring_weight_grads."""
    queue = _QUEUE.get()
    if queue is None or not torch.is_grad_enabled() or not weight.requires_grad:
        return F.linear(x, weight, bias)
    # The weight enters detached: no autograd edge to its accumulator, whose post-accumulate hooks
    # would otherwise fire now, with no gradient; flush accumulates into it later.
    return _LinearDeferredWeightGrad.apply(x, weight.detach(), bias, queue, (weight,))


def flush(queue: list) -> None:
    """Compute and accumulate the weight gradients queued by the backward of one micro-batch."""
    if not queue:
        return
    weights, grads = [], []
    for weight, x, grad in queue:
        rows = grad.reshape(-1, grad.shape[-1])
        weights.append(weight)  # under autocast the backward's GEMM ran in the output gradient's dtype
        grads.append(rows.t().matmul(x.reshape(-1, x.shape[-1]).to(rows.dtype)).to(weight.dtype))
    queue.clear()
    torch.autograd.backward(weights, grads)


class _LinearDeferredWeightGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, queue, parameter):
        ctx.save_for_backward(x, weight)
        ctx.queue, ctx.parameter, ctx.has_bias = queue, parameter[0], bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad.matmul(weight.to(grad.dtype)) if ctx.needs_input_grad[0] else None
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
        ctx.queue.append((ctx.parameter, x, grad))
        return grad_x, None, grad_bias, None, None
