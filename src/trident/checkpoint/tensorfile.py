"""Safetensors files written and read piece by piece: the writer streams each tensor's bytes in
bounded chunks straight from the one host copy, digesting the file on the way (it is never read
back) and reporting where each tensor's data lies; the reader fetches byte spans, so a rank reads
only what it loads.

The files are plain safetensors (8-byte little-endian header length, JSON header, data), readable
by any safetensors tool; nothing is unpickled.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import torch
import xxhash

from trident.checkpoint.errors import CheckpointError, DamagedCheckpoint
from trident.text.storage import RangeReader, location, open_write

CHUNK_BYTES = 64 << 20  # bytes handed to write() at a time: bounds the writer's transient memory
DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.int8: "I8", torch.bool: "BOOL"}
TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}


def element_size(dtype_name: str) -> int:
    return torch.empty((), dtype=TORCH_DTYPES[dtype_name]).element_size()


def raw_bytes(tensor: torch.Tensor):
    """The tensor's bytes as a buffer over its own memory (no copy); it must be contiguous."""
    return tensor.reshape(-1).view(torch.uint8).numpy()


def write_tensors(path: Path, tensors: dict[str, torch.Tensor], chunk_bytes: int = CHUNK_BYTES) -> tuple[dict, dict]:
    """Write `tensors` (contiguous, on the CPU) as one safetensors file, `chunk_bytes` at a time.
    Returns (the file's {"bytes", "xxh64"}, {key: [first byte, end byte] of its data in the file})."""
    header, position = {}, 0
    for key, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[key] = {"dtype": DTYPES[tensor.dtype], "shape": list(tensor.shape),
                       "data_offsets": [position, position + size]}
        position += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned, as safetensors writes it
    start = 8 + len(text)
    digest = xxhash.xxh64()
    with open_write(path) as handle:
        for block in (struct.pack("<Q", len(text)), text):
            handle.write(block)
            digest.update(block)
        for tensor in tensors.values():
            data = raw_bytes(tensor)
            for lo in range(0, len(data), chunk_bytes):
                block = data[lo:lo + chunk_bytes]
                handle.write(block)
                digest.update(block)
    spans = {key: [start + entry["data_offsets"][0], start + entry["data_offsets"][1]]
             for key, entry in header.items()}
    return {"bytes": start + position, "xxh64": digest.hexdigest()}, spans


def read_span(handle, offset: int, length: int) -> bytes:
    """`length` bytes at `offset` of an open file (every tensor byte a reader loads comes through here)."""
    handle.seek(offset)
    data = handle.read(length)
    if len(data) != length:
        raise DamagedCheckpoint(f"{handle.name}: {length} bytes expected at offset {offset}, the file ends "
                              f"first (truncated)")
    return data


def read_into(handle, offset: int, target: torch.Tensor) -> None:
    """Fill the contiguous tensor `target` with the file's bytes from `offset` (every tensor byte
    a reader loads comes through here: no intermediate copy)."""
    view = raw_bytes(target)
    handle.seek(offset)
    if handle.readinto(view) != len(view):
        raise DamagedCheckpoint(f"{handle.name}: {len(view)} bytes expected at offset {offset}, the file ends "
                                f"first (truncated)")


def read_header(path: Path) -> dict[str, dict]:
    """{key: {"dtype", "shape", "span": [first, end byte in the file]}} from a safetensors header."""
    path = location(path)
    try:
        with RangeReader(path) as handle:
            (length,) = struct.unpack("<Q", read_span(handle, 0, 8))
            if length > handle.size:
                raise ValueError(f"header of {length} bytes in a file of {handle.size}")
            header = json.loads(read_span(handle, 8, length))
    except (OSError, ValueError, struct.error) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(error).__name__}: {error})") from None
    header.pop("__metadata__", None)
    return {key: {"dtype": entry["dtype"], "shape": entry["shape"],
                  "span": [8 + length + entry["data_offsets"][0], 8 + length + entry["data_offsets"][1]]}
            for key, entry in header.items()}


def read_tensors(path) -> dict[str, torch.Tensor]:
    """Every tensor of a small safetensors file (the RNG states), read through a RangeReader."""
    header = read_header(path)
    tensors = {key: torch.empty(entry["shape"], dtype=TORCH_DTYPES[entry["dtype"]]) for key, entry in header.items()}
    with RangeReader(path) as handle:
        for key, entry in header.items():
            read_into(handle, entry["span"][0], tensors[key])
    return tensors


def span_bytes(entry: dict) -> int:
    """Bytes the data of a manifest entry must span: its elements (flat range or shape) x dtype size."""
    count = entry["flat"][1] - entry["flat"][0] if "flat" in entry else math.prod(entry["shape"])
    return count * element_size(entry["dtype"])
