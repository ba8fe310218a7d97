"""The seeded initialisation, generated shard by shard: no rank ever holds a full-size parameter.

Scheme (counter-based, so any slice can be produced without the rest of the tensor):
- every full (unsharded) tensor is cut into fixed tiles on a grid anchored at its origin: 256 x 256
  for matrices, 65536 elements for vectors; tiles at the far edges are cut short by the tensor's
  bounds, so a tile's shape depends only on the full shape and the tile's index;
- tile (i, j) holds normal(0, std) values drawn, in its own shape, from a fresh CPU generator
  seeded by a hash of (seed, the parameter's global name, i, j); values are drawn in fp32;
- a rank walks the tiles overlapping its slice (TP splits along dim 0 or dim 1, at any offset),
  draws each one in turn and copies the overlap into its shard (on the CPU, cast to the shard's
  dtype). A shard on an accelerator is assembled in fp32 in a pinned host buffer and sent in one
  non-blocking copy (cast on the device), not tile by tile from pageable memory: one host-to-device
  copy per shard, the next shard drawn while it travels. At most one tile is alive besides the
  shard (and its staging buffer).
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


class HostStaging:
    """fp32 host buffers that shards are assembled in before one copy each to their device: pinned
    when the device is CUDA (a pageable copy is staged and synchronous), two of them so that the next
    shard is drawn while the last one's copy is in flight (an event says when a buffer is free)."""

    def __init__(self, pin: bool):
        self.pin = pin
        self.slots: list[list] = [[None, None], [None, None]]  # [buffer, event of its last copy]
        self.turn = 0

    def send(self, out: torch.Tensor, fill) -> None:
        """fill(host) writes the shard's fp32 values into `host` (out's shape); then one copy into `out`."""
        slot = self.slots[self.turn]
        self.turn ^= 1
        if slot[1] is not None:
            slot[1].synchronize()  # its previous copy has left the buffer
        if slot[0] is None or slot[0].numel() < out.numel():
            slot[0] = torch.empty(out.numel(), dtype=torch.float32, pin_memory=self.pin)
        host = slot[0][:out.numel()].view(out.shape)
        fill(host)
        out.copy_(host, non_blocking=self.pin)
        if self.pin:
            slot[1] = torch.cuda.Event()
            slot[1].record()

    def finish(self) -> None:
        """Wait for the copies in flight (the buffers may be freed or reused after this)."""
        for slot in self.slots:
            if slot[1] is not None:
                slot[1].synchronize()


@torch.no_grad()
def normal_tiles_(out: torch.Tensor, offsets: list[int], full: tuple[int, ...], std: float,
                  seed: int, name: str, staging: HostStaging | None = None) -> torch.Tensor:
    """Fill `out`, the block of the full tensor of shape `full` starting at `offsets`, with that
    block of the tiled normal(0, std) tensor of (seed, name); in place. A CPU shard is filled tile by
    tile; any other (or any, given `staging`) is assembled on the host and sent in one copy."""
    if is_fake(out) or out.is_meta or out.numel() == 0:
        return out  # a rehearsal: shapes only, nothing to draw
    if out.ndim not in TILE_SHAPES:
        raise ValueError(f"tiled initialisation supports 1-D and 2-D tensors, got shape {tuple(out.shape)}")
    if staging is None and out.device.type == "cpu":
        _draw_tiles(out, offsets, full, std, seed, name)
        return out
    own = staging is None
    staging = staging or HostStaging(pin=out.device.type == "cuda")
    staging.send(out, lambda host: _draw_tiles(host, offsets, full, std, seed, name))
    if own:
        staging.finish()
    return out


def _draw_tiles(out: torch.Tensor, offsets: list[int], full: tuple[int, ...], std: float, seed: int,
                name: str) -> None:
    """The tile-by-tile fill of a host tensor `out` (any dtype: each tile's fp32 values cast into it)."""
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
    devices = {param.device.type for param in model.parameters()} - {"cpu", "meta"}
    staging = HostStaging(pin="cuda" in devices) if devices else None  # one pair of buffers for the model
    for name, param in model.named_parameters():
        kind = _init_kind(name)
        if kind == "zeros":
            param.zero_()
        elif kind == "ones":
            param.fill_(1.0)
        else:
            scale = 1.0 / math.sqrt(2.0 * cfg.num_layers) if name.endswith(OUTPUT_PROJECTIONS) else 1.0
            normal_tiles_(param, shard_offsets(param), full_shape(param), cfg.std * scale, seed, name,
                          staging if param.device.type != "cpu" else None)
    if staging is not None:
        staging.finish()
