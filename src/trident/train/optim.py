"""AdamW with MT-NLG's defaults, and the global gradient norm over a (3D-parallel) model."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from trident.config import TrainConfig


def no_weight_decay(name: str, param: nn.Parameter) -> bool:
    """Biases and LayerNorm parameters are not decayed (1-D tensors), as Megatron."""
    return param.ndim < 2 or name.endswith(".bias")


def build_optimizer(named_params: list[tuple[str, nn.Parameter]], train: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for n, p in named_params if not no_weight_decay(n, p)]
    no_decay = [p for n, p in named_params if no_weight_decay(n, p)]
    groups = [{"params": decay, "weight_decay": train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=train.lr, betas=(train.adam_beta1, train.adam_beta2), eps=train.adam_eps,
                             foreach=True)


def counts_towards_norm(name: str, param: nn.Parameter, is_first_stage: bool) -> bool:
    """Each parameter counted once across the model-parallel group: TP shards all count (they are
    disjoint), TP-replicated parameters only on TP rank 0, and the tied word embedding only on the
    first pipeline stage (the last stage holds a synchronised copy)."""
    if getattr(param, "tp_dim", None) is None and getattr(param, "tp_rank", 0) != 0:
        return False
    if name.endswith("embedding.word.weight") and not is_first_stage:
        return False
    return True


def global_grad_norm(named_params: list[tuple[str, nn.Parameter]], model_parallel_group,
                     is_first_stage: bool) -> float:
    """L2 norm of the whole model's gradient, identical on every rank of the model-parallel group."""
    grads = [p.grad for n, p in named_params if p.grad is not None and counts_towards_norm(n, p, is_first_stage)]
    device = grads[0].device if grads else torch.device("cpu")
    total = torch.zeros((), dtype=torch.float32, device=device)
    for grad in grads:
        total += grad.detach().float().pow(2).sum()
    if model_parallel_group is not None:
        dist.all_reduce(total, group=model_parallel_group)
    return math.sqrt(total.item())


def clip_gradients(params: list[nn.Parameter], norm: float, max_norm: float) -> None:
    if max_norm > 0 and norm > max_norm and math.isfinite(norm):
        coefficient = max_norm / (norm + 1e-6)
        torch._foreach_mul_([p.grad for p in params if p.grad is not None], coefficient)
