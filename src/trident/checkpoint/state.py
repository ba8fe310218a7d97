"""What a checkpoint holds beyond the weights: the optimizer's owned flat ranges as per-parameter
pieces (so another layout can read them), and every RNG stream (so a resume is exact)."""
from __future__ import annotations

import torch

from trident.checkpoint.format import optimizer_piece
from trident.parallel import tensor as T


def owned_slices(named_params: list, buffers, optimizer):
    """(name, param, range index, param-relative flat slice, range-relative flat slice) for every
    part of a parameter that falls in one of the optimizer's owned ranges."""
    for index, (lo, hi) in enumerate(optimizer.ranges):
        for name, param in named_params:
            start, end = buffers.param_range(param)
            a, b = max(start, lo), min(end, hi)
            if a < b:
                yield name, param, index, slice(a - start, b - start), slice(a - lo, b - lo)


def optimizer_pieces(named_params: list, buffers, optimizer) -> list[dict]:
    """Per parameter, the part of its flattened (TP-local) tensor this rank's optimizer owns."""
    pieces = []
    for name, param, i, in_param, in_range in owned_slices(named_params, buffers, optimizer):
        master = optimizer.master[i][in_range] if optimizer.separate_master else None
        pieces.append(optimizer_piece(name, param, (in_param.start, in_param.stop), optimizer.exp_avg[i][in_range],
                                      optimizer.exp_avg_sq[i][in_range], master))
    return pieces


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"torch_cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["torch_cuda"] = torch.cuda.get_rng_state(device)
    return state | {f"tp_{k}": v for k, v in T.TP_RNG.get_states().items()}


def set_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["torch_cpu"])
    if "torch_cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["torch_cuda"], device)
    T.TP_RNG.set_states({k[3:]: v for k, v in state.items() if k.startswith("tp_")})
