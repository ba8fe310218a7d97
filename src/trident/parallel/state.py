"""A parallel model's state as plain records: the one interface between the model and whatever saves,
loads or inspects it (checkpoints, HF import, rehearsal, replay), as torchtitan's stateful containers
are for DCP.

A `StatePiece` names what it holds by global name and kind, where it sits in the full tensor, and
the live tensor itself: a save copies `tensor`; a load fills it in place (optimizer pieces are views
of the owned flat ranges, so filling them is the load). Kinds:
  weight                      a parameter's TP-local shard (`offsets`/`shape` in `full_shape`), or under
                              ZeRO-3 the flat range `flat` of it this rank owns
  master, exp_avg, exp_avg_sq the fp32 Adam state of the flat range `flat` of that shard
  rng                         one RNG stream of this rank (a state tensor, by stream name)
  scaler, trainer             JSON values: the loss scaler's state, the optimizer's step count
`primary` is False on a piece that an identical replica on another rank also holds (weights on all
but the gradient group's first rank below ZeRO-3; Adam state there too without ZeRO; under hybrid
sharding, owned parts on all but a shard's first replica): a save writes it once, a load fills every copy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trident.parallel.sharding import full_shape, shard_offsets

TENSOR_KINDS = ("weight", "master", "exp_avg", "exp_avg_sq")
ADAM_KINDS = ("exp_avg", "exp_avg_sq", "master")
VALUE_KINDS = ("scaler", "trainer")
KINDS = (*TENSOR_KINDS, "rng", *VALUE_KINDS)


@dataclass
class StatePiece:
    name: str  # global parameter name; the stream name (rng); the value's key (scaler, trainer)
    kind: str
    tensor: torch.Tensor | None = None
    full_shape: tuple[int, ...] = ()
    offsets: tuple[int, ...] = ()  # where this rank's TP-local tensor starts in the full one
    shape: tuple[int, ...] = ()  # the TP-local tensor's shape
    flat: tuple[int, int] | None = None  # the part of the flattened TP-local tensor held (Adam kinds; ZeRO-3 weights)
    value: Any = None  # scaler / trainer
    primary: bool = True


def weight_piece(name: str, param: torch.nn.Parameter, primary: bool = True) -> StatePiece:
    return StatePiece(name, "weight", param, full_shape(param), tuple(shard_offsets(param)), tuple(param.shape),
                      primary=primary)


def weight_pieces(named_params: list, primary: bool = True) -> list[StatePiece]:
    return [weight_piece(name, param, primary) for name, param in named_params]


def owned_weight_pieces(named_params: list, weights, primary: bool = True) -> list[StatePiece]:
    """ZeRO-3: per parameter, the part of its flattened (TP-local) tensor this rank owns, a view of the
    owned weights (`weights`: a ParamBuffers); every part is primary (the gradient group's parts are
    disjoint), except under hybrid sharding, where only the first copy of a shard is (`primary`)."""
    pieces = []
    for name, param in named_params:
        a, b = weights.layout.owned_slice(param)
        if a < b:
            pieces.append(StatePiece(name, "weight", weights.owned_param(param), full_shape(param),
                                     tuple(shard_offsets(param)), tuple(param.shape), flat=(a, b), primary=primary))
    return pieces


def owned_slices(named_params: list, optimizer):
    """(name, param, range index, param-relative flat slice, range-relative flat slice) for every
    part of a parameter that falls in one of the optimizer's owned ranges."""
    for index, (lo, hi) in enumerate(optimizer.ranges):
        for name, param in named_params:
            start, end = optimizer.layout.param_range(param)
            a, b = max(start, lo), min(end, hi)
            if a < b:
                yield name, param, index, slice(a - start, b - start), slice(a - lo, b - lo)


def adam_pieces(named_params: list, optimizer, primary: bool = True) -> list[StatePiece]:
    """Per parameter and Adam kind, the part of its flattened (TP-local) tensor this rank's optimizer
    owns, as views of the optimizer's flat state (the master only when it is a separate fp32 copy)."""
    pieces = []
    for name, param, i, in_param, in_range in owned_slices(named_params, optimizer):
        where = (full_shape(param), tuple(shard_offsets(param)), tuple(param.shape), (in_param.start, in_param.stop))
        pieces.append(StatePiece(name, "exp_avg", optimizer.exp_avg[i][in_range], *where, primary=primary))
        pieces.append(StatePiece(name, "exp_avg_sq", optimizer.exp_avg_sq[i][in_range], *where, primary=primary))
        if optimizer.separate_master:
            pieces.append(StatePiece(name, "master", optimizer.master[i][in_range], *where, primary=primary))
    return pieces


def rng_pieces(states: dict[str, torch.Tensor]) -> list[StatePiece]:
    return [StatePiece(name, "rng", tensor) for name, tensor in states.items()]


def by_kind(pieces: list[StatePiece], *kinds: str) -> list[StatePiece]:
    return [piece for piece in pieces if piece.kind in kinds]
