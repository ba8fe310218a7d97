"""The optimizer of a (3D-parallel) model: flat DP buffers + AdamW (ZeRO stage 1-3 when asked), MT-NLG's
defaults, decay masks, and the global gradient norm with every parameter counted exactly once."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from trident.config import Config
from trident.parallel.data import GradBuffers, flat_buffers
from trident.parallel.hybrid import zero_groups
from trident.parallel.param_buffers import ParamBuffers
from trident.parallel.watch import watched
from trident.parallel.zero import DistributedAdam


def no_weight_decay(name: str, param: nn.Parameter) -> bool:
    """Biases and LayerNorm parameters are not decayed (1-D tensors), as Megatron."""
    return param.ndim < 2 or name.endswith(".bias")


def build_optimizer(named_params: list, config: Config, mesh, zero_stage: int, counted: dict[int, bool],
                    alone: list = (), unit_of: dict | None = None
                    ) -> tuple[ParamBuffers, GradBuffers, DistributedAdam]:
    """Flat weight and gradient buffers over `named_params` (bucketed for the gradient group dp x cp,
    `alone` parameters in buckets of their own, never across two units of `unit_of`; with dp x cp > 1
    and parallel.overlap_grad_reduce each bucket's reduction overlaps the backward once its gradients
    are final) and AdamW over the ranges this rank owns (with ZeRO, `zero_stage` in effect, 1/G of each
    bucket: G = dp x cp, or parallel.dp_shard's shard group); `counted` says, by id(param), which
    parameters this rank counts in the global gradient norm."""
    p, t = config.parallel, config.train
    gradient = mesh.gradient  # the group the gradients are reduced over: dp x cp
    group, size, place, replicas = zero_groups(mesh, zero_stage, gradient)  # parallel.dp_shard: a shard group of it
    params, grads = flat_buffers(named_params, group, size, place, int(p.bucket_size_mb * 2**20), stage=zero_stage,
                                 overlap=gradient.size > 1 and p.overlap_grad_reduce, timeout_s=p.timeout_s, alone=alone,
                                 unit_of=unit_of, replicas=replicas)
    decay = {id(param): not no_weight_decay(name, param) for name, param in named_params}
    optimizer = DistributedAdam(params, grads, decay, counted, t.lr, (t.adam_beta1, t.adam_beta2), t.adam_eps,
                                t.weight_decay)
    return params, grads, optimizer


def global_grad_norm_squared(optimizer: DistributedAdam, mesh, zero: bool) -> torch.Tensor:
    """Squared L2 norm of the whole model's gradient (0-d), identical on every rank. With ZeRO each
    rank of the gradient group holds a disjoint part, so the sum runs over the world (under hybrid sharding the first
    replica of each shard counts it); otherwise over one model replica."""
    total = optimizer.grad_norm_squared()
    if zero and optimizer.layout.replicas.rank > 0:
        total = torch.zeros_like(total)
    group = None if zero else mesh.group("mp")
    if (zero and mesh.world_size > 1) or group is not None:
        with watched(group, "all_reduce grad norm"):
            dist.all_reduce(total, group=group)
    return total


def clip_coefficient(norm: float, max_norm: float) -> float:
    return max_norm / (norm + 1e-6) if max_norm > 0 and norm > max_norm and math.isfinite(norm) else 1.0


def scale_(tensors: list[torch.Tensor], factor: float) -> None:
    if factor != 1.0:
        torch._foreach_mul_([t for t in tensors if t.numel()], factor)
