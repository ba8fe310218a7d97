"""What a checkpoint holds beyond the weights, and how a trainer is put back: the optimizer's owned
flat ranges as per-parameter pieces (so another layout can read them), RNG streams, counters."""
from __future__ import annotations

import torch

from trident.model.gpt import full_shape
from trident.parallel import tensor as T
from trident.train import checkpoint as ckpt


def optimizer_pieces(named_params: list, buffers, optimizer) -> list[dict]:
    """Per parameter, the part of its flattened (TP-local) tensor this rank's optimizer owns."""
    pieces = []
    for (lo, hi), m, v, master in zip(optimizer.ranges, optimizer.exp_avg, optimizer.exp_avg_sq, optimizer.master):
        for name, param in named_params:
            start, end = buffers.param_range(param)
            a, b = max(start, lo), min(end, hi)
            if a >= b:
                continue
            piece = {"name": name, "flat": [a - start, b - start], "offsets": ckpt.shard_offsets(param),
                     "shape": list(param.shape), "full_shape": list(full_shape(param)),
                     "exp_avg": m[a - lo:b - lo], "exp_avg_sq": v[a - lo:b - lo]}
            if optimizer.separate_master:
                piece["master"] = master[a - lo:b - lo]
            pieces.append(piece)
    return pieces


@torch.no_grad()
def load_optimizer(reader: ckpt.CheckpointReader, named_params: list, buffers, optimizer, steps: int) -> None:
    """Fill the owned ranges from a checkpoint of any layout (fp32 master from the saved master if
    there is one, else from the saved fp32 weights)."""
    has_master = bool(reader.names("master"))
    for (lo, hi), m, v, master in zip(optimizer.ranges, optimizer.exp_avg, optimizer.exp_avg_sq, optimizer.master):
        for name, param in named_params:
            start, end = buffers.param_range(param)
            a, b = max(start, lo), min(end, hi)
            if a >= b:
                continue
            offsets, shape = ckpt.shard_offsets(param), tuple(param.shape)

            def flat(kind: str) -> torch.Tensor:
                return reader.read(name, kind, offsets, shape).flatten()[a - start:b - start]

            m[a - lo:b - lo] = flat("exp_avg")
            v[a - lo:b - lo] = flat("exp_avg_sq")
            if optimizer.separate_master:
                master[a - lo:b - lo] = flat("master" if has_master else "model")
    optimizer.steps = steps


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
