"""How data parallelism cuts a rank's parameters into buckets, one reduced by one collective each: the
rule the trainer's flat buffers (flat_layout.py) follow and the planner (plan/zero_buffers.py) sizes,
in one place and without torch.

Parameters come in flat order (the reverse of creation: the order backward finishes them). A bucket
closes once it holds at least `bucket_bytes` of fp32 gradient; a parameter held `alone` (the tied
embedding, whose two pipeline stages' copies are summed over owned slices that must line up) gets a
bucket of its own; with units (ZeRO-3: a block, or a chunk's root) no bucket spans two units, so each
unit is gathered on its own. Each bucket is padded to a multiple of ALIGN x the group it is sharded
over, so every bucket and every member's slice of it starts on an ALIGN-element boundary (512 bytes
of fp32 gradient, 256 of 16-bit weights): NCCL and the copy kernels move aligned buffers with wide
vector loads (Megatron pads its buckets likewise).
"""
from __future__ import annotations

from dataclasses import dataclass

GRAD_BYTES = 4  # trident's gradients: fp32
ALIGN = 128  # elements: where buckets and their shards start


@dataclass(frozen=True)
class Cut:
    start: float  # flat offset of the bucket
    end: float  # exclusive, padded to a multiple of ALIGN x the shard group's size
    members: range  # indices of the parameters inside, in flat order


def cut_buckets(sizes: list, bucket_bytes: float, multiple: int, units: list | None = None,
                alone: list | None = None) -> tuple[list[Cut], list]:
    """(buckets, each parameter's flat offset) for parameters of `sizes` elements in flat order; `units`
    and `alone` (per parameter, when given): the unit it belongs to, whether it is held alone.
    `multiple`: the size of the group a bucket is sharded over (1: not sharded)."""
    multiple *= ALIGN
    units = units or [None] * len(sizes)
    alone = alone or [False] * len(sizes)
    cuts: list[Cut] = []
    offsets = []
    position, start, first, unit = 0, 0, 0, None

    def close(last: int) -> None:
        nonlocal position, start, first
        position = start + -(-(position - start) // multiple) * multiple
        cuts.append(Cut(start, position, range(first, last)))
        start, first = position, last

    for i, size in enumerate(sizes):
        if i > first and (alone[i] or units[i] != unit):
            close(i)
        unit = units[i]
        offsets.append(position)
        position += size
        if alone[i] or (position - start) * GRAD_BYTES >= bucket_bytes:
            close(i + 1)
    if first < len(sizes):
        close(len(sizes))
    return cuts, offsets
