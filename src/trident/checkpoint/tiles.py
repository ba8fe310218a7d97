"""Tiles: the units a saved tensor is digested and read in, so a rank that loads part of it reads
(and verifies) only the tiles that hold that part.

A saved block (a rank's shard of a parameter, shape (rows, cols, *inner)) is cut into a grid of
tiles of `tile = [tile_rows, tile_cols]` (whole inner dims). Tile edges fall on every 1/2, 1/4
and 1/8 of rows and columns whenever those divide evenly, so splitting a block for a TP degree up
to 8x larger reads exactly its part. A ZeRO piece holds the flat range [a, b) of its block; its
digest of a tile covers the tile's elements that fall in [a, b), in row-major order. Tiles are
walked a band (a row of tiles) at a time: a band is one contiguous stretch of the block.
"""
from __future__ import annotations

import math

import torch
import xxhash

from trident.checkpoint.tensorfile import raw_bytes

TILE_BYTES = 1 << 20  # a tile is at most about this large (smaller when a block is small)
GROUPS = 8  # tiles across each of the first two dims: TP re-splits up to 8x fall on tile edges


def grid_shape(shape) -> tuple[int, int, int]:
    """The block as (rows, cols, inner): dims after the second are never split."""
    shape = list(shape)
    if not shape:
        return 1, 1, 1
    if len(shape) == 1:
        return shape[0], 1, 1
    return shape[0], shape[1], math.prod(shape[2:])


def _group(n: int) -> int:
    return n // GROUPS if n >= GROUPS and n % GROUPS == 0 else max(1, -(-n // GROUPS))


def tile_shape(shape, element_size: int, target_bytes: int = TILE_BYTES) -> list[int]:
    """[tile_rows, tile_cols] for a block: 1/8 of each dim, rows halved (keeping the 1/8 edges)
    until a tile is at most `target_bytes`."""
    rows, cols, inner = grid_shape(shape)
    tile_cols = _group(cols)
    tile_rows = _group(rows)
    while tile_rows % 2 == 0 and tile_rows * tile_cols * inner * element_size > target_bytes:
        tile_rows //= 2
    return [tile_rows, tile_cols]


def tile_count(shape, tile) -> tuple[int, int]:
    rows, cols, _ = grid_shape(shape)
    return -(-rows // tile[0]), -(-cols // tile[1])


def band_flat_range(shape, tile, band: int) -> tuple[int, int]:
    """Block-flat [first, end) element range of band `band`."""
    rows, cols, inner = grid_shape(shape)
    r0, r1 = band * tile[0], min(rows, (band + 1) * tile[0])
    return r0 * cols * inner, r1 * cols * inner


def band_rows(shape, tile, band: int) -> tuple[int, int]:
    rows = grid_shape(shape)[0]
    return band * tile[0], min(rows, (band + 1) * tile[0])


class Scratch:
    """Reusable buffers (one per use and dtype), so walking tiles does not allocate fresh memory
    for every band and tile."""

    def __init__(self):
        self.buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def get(self, use: str, count: int, dtype: torch.dtype) -> torch.Tensor:
        buffer = self.buffers.get((use, dtype))
        if buffer is None or buffer.numel() < count:
            buffer = self.buffers[(use, dtype)] = torch.empty(count, dtype=dtype)
        return buffer[:count]


def band_digests(values: torch.Tensor, mask: torch.Tensor | None, tile_cols: int, groups: range,
                 scratch: Scratch) -> list:
    """Digest (hex) of each tile column `groups` of a band (values [band rows, cols, inner]; mask
    marks the elements the piece holds, None: all), None where the piece holds none of the tile."""
    digests = []
    for g in groups:
        part = values[:, g * tile_cols:(g + 1) * tile_cols]
        if mask is not None:
            held = mask[:, g * tile_cols:(g + 1) * tile_cols]
            if not bool(held.any()):
                digests.append(None)
                continue
            part = part[held]
        elif not part.is_contiguous():  # gathered into a reused buffer: row-major order of the tile
            gathered = scratch.get("tile", part.numel(), part.dtype)
            gathered.view(part.shape).copy_(part)
            part = gathered
        digests.append(xxhash.xxh64(raw_bytes(part)).hexdigest())
    return digests


def piece_digests(values: torch.Tensor, shape, flat: tuple[int, int], tile) -> list:
    """Every tile's digest (band by band, None where empty) of a piece: `values` are the block's
    flat range `flat` (the whole block when flat is (0, numel))."""
    rows, cols, inner = grid_shape(shape)
    bands, groups = tile_count(shape, tile)
    lo, hi = flat
    whole = lo == 0 and hi == rows * cols * inner
    digests, scratch = [], Scratch()
    for band in range(bands):
        r0, r1 = band_rows(shape, tile, band)
        start, end = band_flat_range(shape, tile, band)
        if whole:
            block = values.reshape(-1)[start:end].view(r1 - r0, cols, inner)
            digests += band_digests(block, None, tile[1], range(groups), scratch)
            continue
        a, b = max(start, lo), min(end, hi)
        if a >= b:
            digests += [None] * groups
            continue
        block = torch.zeros(end - start, dtype=values.dtype)
        mask = torch.zeros(end - start, dtype=torch.bool)
        block[a - start:b - start] = values.reshape(-1)[a - lo:b - lo]
        mask[a - start:b - start] = True
        digests += band_digests(block.view(r1 - r0, cols, inner), mask.view(r1 - r0, cols, inner), tile[1],
                                range(groups), scratch)
    return digests
