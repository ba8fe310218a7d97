"""Megatron tensor slicing: column/row-parallel linear, vocab-parallel embedding and cross-entropy,
with the communication as autograd functions. With a TPContext of size 1 every layer is plain PyTorch.
Layers take torch.nn's `device=` and `dtype=` and create their parameters there (weights left empty
for the model's seeded initialisation). Norms: parallel/norms.py; grouped key/value heads: kv_heads.py.

Activations are sequence-first [s, b, h]; sequence parallelism splits dim 0 across TP ranks.
Every sharded parameter carries `tp_dim` (the dimension split across ranks; see parallel/sharding.py),
so initialisation and checkpoints can map a shard to its slice of the full tensor.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from trident.parallel.sharding import mark
from trident.parallel.tp_context import NO_TP, TPContext  # noqa: F401 (the layers' API)
from trident.parallel.tp_random import TPRandomState, checkpoint_rng_contexts, tp_split_rng  # noqa: F401 (the layers' API)
from trident.parallel.token_ids import check_token_ids
from trident.parallel.watch import watched
from trident.parallel.weight_grad import linear


def _divide(total: int, parts: int, what: str) -> int:
    if total % parts:
        raise ValueError(f"{what}={total} is not divisible by the tensor-parallel size {parts}")
    return total // parts


# ---- communication primitives (forward op, backward is its conjugate) --------------------------------

def _all_reduce(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    x = x.contiguous()
    with watched(tp.group, "all_reduce"):
        dist.all_reduce(x, group=tp.group)
    return x


def _gather(x: torch.Tensor, tp: TPContext, dim: int) -> torch.Tensor:
    """All-gather along `dim` (concatenated in rank order)."""
    moved = x.movedim(dim, 0).contiguous()
    out = torch.empty((moved.shape[0] * tp.size,) + moved.shape[1:], dtype=x.dtype, device=x.device)
    with watched(tp.group, "all_gather"):
        dist.all_gather_into_tensor(out, moved, group=tp.group)
    return out.movedim(0, dim)


def _split(x: torch.Tensor, tp: TPContext, dim: int) -> torch.Tensor:
    size = _divide(x.shape[dim], tp.size, f"dimension {dim} of shape {tuple(x.shape)}")
    return x.narrow(dim, tp.rank * size, size).contiguous()


def _reduce_scatter(x: torch.Tensor, tp: TPContext, dim: int) -> torch.Tensor:
    moved = x.movedim(dim, 0).contiguous()
    size = _divide(moved.shape[0], tp.size, f"dimension {dim} of shape {tuple(x.shape)}")
    out = torch.empty((size,) + moved.shape[1:], dtype=x.dtype, device=x.device)
    with watched(tp.group, "reduce_scatter"):
        dist.reduce_scatter_tensor(out, moved, group=tp.group)
    return out.movedim(0, dim)


class _Comm(torch.autograd.Function):
    """One autograd function for all pairs: forward applies `fwd`, backward applies `bwd`."""

    @staticmethod
    def forward(ctx, x, tp, fwd, bwd, dim):
        ctx.tp, ctx.bwd, ctx.dim = tp, bwd, dim
        return _OPS[fwd](x, tp, dim)

    @staticmethod
    def backward(ctx, grad):
        return _OPS[ctx.bwd](grad, ctx.tp, ctx.dim), None, None, None, None


_OPS = {
    "identity": lambda x, tp, dim: x,
    "all_reduce": lambda x, tp, dim: _all_reduce(x, tp),
    "gather": _gather,
    "split": _split,
    "reduce_scatter": _reduce_scatter,
}


def _comm(x, tp: TPContext, fwd: str, bwd: str, dim: int = -1):
    return x if tp.size == 1 else _Comm.apply(x, tp, fwd, bwd, dim)


def copy_to_tp(x, tp):  # identity forward, all-reduce of the gradient backward
    return _comm(x, tp, "identity", "all_reduce")


def reduce_from_tp(x, tp):  # all-reduce forward, identity backward
    return _comm(x, tp, "all_reduce", "identity")


def gather_from_tp(x, tp, dim=-1):  # all-gather forward, split backward
    return _comm(x, tp, "gather", "split", dim)


def scatter_to_sequence(x, tp):  # split along the sequence forward, all-gather backward
    return _comm(x, tp, "split", "gather", 0)


def gather_from_sequence(x, tp):  # all-gather along the sequence forward, reduce-scatter backward
    return _comm(x, tp, "gather", "reduce_scatter", 0)


def reduce_scatter_to_sequence(x, tp):  # reduce-scatter forward, all-gather backward
    return _comm(x, tp, "reduce_scatter", "gather", 0)


def column_parallel_input(x, tp):  # what every column-parallel layer multiplies: the whole sequence
    return gather_from_sequence(x, tp) if tp.sequence_parallel else copy_to_tp(x, tp)


# ---- layers ------------------------------------------------------------------------------------------

class ColumnParallelLinear(nn.Module):
    """Y = X A^T + b with A's output rows split across TP ranks; each rank returns its slice of Y.

    With sequence parallelism the input arrives split along the sequence and is all-gathered here.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, tp: TPContext = NO_TP,
                 device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.tp = tp
        self.in_features = in_features
        self.out_features_local = _divide(out_features, tp.size, "output features")
        self.weight = mark(nn.Parameter(torch.empty(self.out_features_local, in_features, **factory)), 0, tp)
        self.bias = mark(nn.Parameter(torch.zeros(self.out_features_local, **factory)), 0, tp) if bias else None

    def forward(self, x: torch.Tensor, gathered: bool = False) -> torch.Tensor:  # gathered: input shared, done
        if x.shape[-1] != self.in_features:
            raise ValueError(f"ColumnParallelLinear expects {self.in_features} input features, got {tuple(x.shape)}")
        x = x if gathered else column_parallel_input(x, self.tp)
        return linear(x, self.weight, self.bias)  # weight gradient deferrable (zero-bubble schedules)


class RowParallelLinear(nn.Module):
    """Y = X A^T + b with A's input columns split: the input is already split (from a column-parallel
    layer), partial products are summed across TP (or reduce-scattered along the sequence with SP)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, tp: TPContext = NO_TP,
                 device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.tp = tp
        self.in_features_local = _divide(in_features, tp.size, "input features")
        self.weight = mark(nn.Parameter(torch.empty(out_features, self.in_features_local, **factory)), 1, tp)
        # The bias is added once, after the reduction, so it is replicated across TP ranks.
        self.bias = mark(nn.Parameter(torch.zeros(out_features, **factory)), None, tp) if bias else None
        if self.bias is not None:
            self.bias.sequence_parallel = tp.sequence_parallel and tp.size > 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features_local:
            raise ValueError(f"RowParallelLinear expects {self.in_features_local} local input features, "
                             f"got {tuple(x.shape)}")
        partial = linear(x, self.weight)
        if self.tp.sequence_parallel:
            out = reduce_scatter_to_sequence(partial, self.tp)
        else:
            out = reduce_from_tp(partial, self.tp)
        return out + self.bias if self.bias is not None else out


class VocabParallelEmbedding(nn.Module):
    """Embedding table split by vocabulary rows; tokens outside a rank's range contribute zeros."""

    def __init__(self, num_embeddings: int, embedding_dim: int, tp: TPContext = NO_TP, device=None, dtype=None):
        super().__init__()
        self.tp = tp
        self.num_embeddings = num_embeddings
        self.rows_local = _divide(num_embeddings, tp.size, "vocabulary size")
        self.vocab_start = tp.rank * self.rows_local
        weight = torch.empty(self.rows_local, embedding_dim, device=device, dtype=dtype)
        self.weight = mark(nn.Parameter(weight), 0, tp)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self._check_ids(tokens)
        if self.tp.size == 1:
            return F.embedding(tokens, self.weight)
        local = tokens - self.vocab_start
        outside = (local < 0) | (local >= self.rows_local)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(out, self.tp)

    def _check_ids(self, tokens: torch.Tensor) -> None:
        # rehearsal tensors hold no values; on an accelerator the check would stall the stream every
        # forward, so there the trainer checks each batch on the host as it assembles it
        if is_fake(tokens) or tokens.is_meta or tokens.device.type != "cpu":
            return
        check_token_ids(tokens, self.num_embeddings)


def _tp_reduce(x: torch.Tensor, tp: TPContext, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if tp.size > 1:
        with watched(tp.group, "all_reduce"):
            dist.all_reduce(x, op=op, group=tp.group)
    return x


def _shifted_logits(logits: torch.Tensor, tp: TPContext) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 logits minus the row maximum over the whole vocabulary, that maximum)."""
    logits = logits.float()
    max_logit = _tp_reduce(logits.max(dim=-1).values, tp, dist.ReduceOp.MAX)
    return logits - max_logit.unsqueeze(-1), max_logit


def _target_logit(shifted: torch.Tensor, labels: torch.Tensor, tp: TPContext):
    """(logit of each label, from the rank whose vocabulary slice holds it; label index within this
    rank's slice; mask of labels outside it)."""
    rows = shifted.shape[-1]
    local = labels - tp.rank * rows
    outside = (local < 0) | (local >= rows)
    local = local.masked_fill(outside, 0)
    target = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
    return _tp_reduce(target, tp), local, outside


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross-entropy over logits split by vocabulary; only [s, b] statistics cross ranks."""

    @staticmethod
    def forward(ctx, logits, labels, tp):
        shifted, _ = _shifted_logits(logits, tp)
        target, local, outside = _target_logit(shifted, labels, tp)
        exp = shifted.exp()
        sum_exp = _tp_reduce(exp.sum(dim=-1), tp)
        loss = sum_exp.log() - target
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local, outside)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, local, outside = ctx.saved_tensors
        grad = softmax
        hit = (~outside).to(grad.dtype)
        grad.scatter_add_(-1, local.unsqueeze(-1), -hit.unsqueeze(-1))
        return grad * grad_loss.unsqueeze(-1), None, None


@torch.inference_mode()
def vocab_parallel_scores(logits: torch.Tensor, targets: torch.Tensor, tp: TPContext,
                          vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), first arg-max over the real vocabulary), each [b, s], from logits [b, s, V/tp]
    holding this TP rank's vocabulary slice; the full logits are never gathered. Columns >=
    vocab_size (the padded rows of the embedding) never count. fp32."""
    rows = logits.shape[-1]
    start = tp.rank * rows
    columns = torch.arange(start, start + rows, device=logits.device)
    shifted, max_logit = _shifted_logits(logits.float().masked_fill(columns >= vocab_size, float("-inf")), tp)
    local_best, local_arg = shifted.max(dim=-1)
    # the first index holding the global maximum (shifted to 0), as torch.argmax over the whole row
    candidate = torch.where(local_best == 0, local_arg + start, torch.full_like(local_arg, 2**62))
    argmax = _tp_reduce(candidate, tp, dist.ReduceOp.MIN)
    sum_exp = _tp_reduce(shifted.exp().sum(dim=-1), tp)
    target, _, _ = _target_logit(shifted, targets, tp)
    return target - sum_exp.log(), argmax


def vocab_parallel_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, tp: TPContext = NO_TP):
    """Per-token loss from logits whose last dim is this rank's vocabulary slice (the full logits are
    never gathered). Computed in fp32 whatever the logits' dtype."""
    if tp.size == 1:
        flat = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten(), reduction="none")
        return flat.view(labels.shape)
    return _VocabParallelCrossEntropy.apply(logits, labels, tp)


def parallel_lm_logits(hidden: torch.Tensor, word_embeddings: torch.Tensor, tp: TPContext = NO_TP):
    """Logits for this rank's vocabulary slice from the tied embedding: the head is column-parallel."""
    return F.linear(column_parallel_input(hidden, tp), word_embeddings)


class SequenceParallelLayerNorm(nn.LayerNorm):
    """LayerNorm whose parameters are replicated across TP; with SP their gradients must be summed
    across TP ranks (each saw only part of the sequence), which the gradient finaliser does."""

    def __init__(self, hidden: int, eps: float, tp: TPContext = NO_TP, bias: bool = True, device=None, dtype=None):
        super().__init__(hidden, eps=eps, bias=bias, device=device, dtype=dtype)
        for param in self.parameters():
            mark(param, None, tp)
            param.sequence_parallel = tp.sequence_parallel and tp.size > 1
