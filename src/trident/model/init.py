"""The seeded initialisation, generated shard by shard: no rank ever holds a full-size parameter.

Scheme (counter-based, so any slice can be produced without the rest of the tensor):
- every full (unsharded) tensor is cut into fixed tiles on a grid anchored at its origin: 256 x 256
  for matrices, 65536 elements for vectors; tiles at the far edges are cut short by the tensor's
  bounds, so a tile's shape depends only on the full shape and the tile's index;
- tile (i, j) holds normal(0, std) values drawn, in its own shape, from a fresh CPU generator
  seeded by a hash of (seed, the parameter's global name, i, j); values are drawn in fp32;
- a rank walks the tiles overlapping its slice (TP splits along dim 0 or dim 1, at any offset),
  draws each one in turn and copies the overlap into its shard, cast to the shard's dtype and
  moved to its device. At most one tile is alive besides the shard.
The values are therefore a function of (seed, name, full shape) alone: every TP/PP layout starts
from exactly the model one process builds. Parameters are global-named (blocks by their global
layer index). Under FakeTensorMode or on the meta device nothing is drawn.

Megatron's recipe: weights normal(0, cfg.std), output projections of each block scaled by
1/sqrt(2L), biases zero, LayerNorm weights one.
"""
from __future__ import annotations

import hashlib
import itertools
import math

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from trident.parallel.sharding import full_shape, shard_offsets

OUTPUT_PROJECTIONS = ("attention.proj.weight", "mlp.fc2.weight")
TILE_SHAPES = {1: (65536,), 2: (256, 256)}  # same element count: one tile is 256 KiB of fp32


def tile_seed(seed: int, name: str, index: tuple[int, ...]) -> int:
    """The generator seed of one tile: a 63-bit hash of (seed, name, tile index)."""
    key = f"{seed}/{name}/{'.'.join(map(str, index))}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def _tile_ranges(offset: int, size: int, full: int, tile: int):
    """(tile index, tile start, tile end) of the tiles along one dim overlapping [offset, offset+size)."""
    for t in range(offset // tile, (offset + size - 1) // tile + 1):
        yield t, t * tile, min((t + 1) * tile, full)


@torch.no_grad()
def normal_tiles_(out: torch.Tensor, offsets: list[int], full: tuple[int, ...], std: float,
                  seed: int, name: str) -> torch.Tensor:
    """Fill `out`, the block of the full tensor of shape `full` starting at `offsets`, with that
    block of the tiled normal(0, std) tensor of (seed, name); in place, tile by tile."""
    if is_fake(out) or out.is_meta or out.numel() == 0:
        return out  # a rehearsal: shapes only, nothing to draw
    if out.ndim not in TILE_SHAPES:
        raise ValueError(f"tiled initialisation supports 1-D and 2-D tensors, got shape {tuple(out.shape)}")
    per_dim = [_tile_ranges(o, n, f, t) for o, n, f, t in zip(offsets, out.shape, full, TILE_SHAPES[out.ndim])]
    for tiles in itertools.product(*(list(d) for d in per_dim)):
        shape = [end - start for _, start, end in tiles]
        generator = torch.Generator().manual_seed(tile_seed(seed, name, tuple(t for t, _, _ in tiles)))
        values = torch.empty(shape, dtype=torch.float32, device="cpu").normal_(0.0, std, generator=generator)
        # overlap of the tile with the block, in full-tensor coordinates
        lo = [max(start, o) for (_, start, _), o in zip(tiles, offsets)]
        hi = [min(end, o + n) for (_, _, end), o, n in zip(tiles, offsets, out.shape)]
        src = tuple(slice(a - start, b - start) for a, b, (_, start, _) in zip(lo, hi, tiles))
        dst = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, offsets))
        out[dst].copy_(values[src])
    return out


def _init_kind(name: str) -> str:
    if name.endswith("bias"):
        return "zeros"
    if ".ln" in name or name.startswith("final_norm") or "_norm." in name:
        return "ones"
    return "normal"


@torch.no_grad()
def init_parameters(model: nn.Module, seed: int) -> None:
    """Megatron init of a GPT (or a stage of it), in place, each rank generating only its shard:
    any layout (TP, PP) starts from exactly the model a single process would build."""
    cfg = model.cfg
    for name, param in model.named_parameters():
        kind = _init_kind(name)
        if kind == "zeros":
            param.zero_()
        elif kind == "ones":
            param.fill_(1.0)
        else:
            scale = 1.0 / math.sqrt(2.0 * cfg.num_layers) if name.endswith(OUTPUT_PROJECTIONS) else 1.0
            normal_tiles_(param, shard_offsets(param), full_shape(param), cfg.std * scale, seed, name)
