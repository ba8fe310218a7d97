"""Checkpoint integrity: every file's size and xxh64 digest, and (format 2) every tile's digest,
recorded in the manifest at save time. Opening a checkpoint checks what costs no reading: each
manifest's claims about its files (sizes, and each tensor's byte span, dtype and tile digests);
`verify_files` also checks every file's digest (a whole-checkpoint check); loading checks each tile
as it is read (slices.py). A truncated or corrupted shard, or a manifest that does not match its
files, is refused naming the file and why."""
from __future__ import annotations

import json
import math
from pathlib import Path

import xxhash

from trident.checkpoint import tensorfile
from trident.checkpoint.errors import CheckpointError, DamagedCheckpoint  # noqa: F401 (public here too)
from trident.checkpoint.tiles import tile_count
from trident.text.storage import location


def file_digest(path: Path) -> dict:
    digest, size = xxhash.xxh64(), 0
    with location(path).open("rb") as handle:
        for block in iter(lambda: handle.read(8 << 20), b""):
            digest.update(block)
            size += len(block)
    return {"bytes": size, "xxh64": digest.hexdigest()}


def read_manifest(path: Path) -> dict:
    """The manifest, refused unless it lists tensors and every tensor's file, with its size and
    digest, under a plain file name inside the checkpoint folder."""
    try:
        manifest = json.loads(path.read_text())
        tensors, files = manifest["tensors"], manifest.get("files")
        listed = [entry["file"] for entry in tensors]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: unreadable manifest ({type(error).__name__}: {error})") from None
    if not isinstance(files, dict):
        raise CheckpointError(f"{path}: no 'files' table of sizes and digests; its shards cannot be verified")
    for name in [*files, *listed]:
        _plain_name(name, path)
    for name in listed:
        if name not in files:
            raise CheckpointError(f"{path.parent / name}: holds tensors of {path.name} but has no size and "
                                  f"digest there")
    return manifest


def _plain_name(name, manifest_path: Path) -> None:
    """Only a file directly inside the checkpoint folder may be read (no '../', no absolute paths)."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or ":" in name:
        raise CheckpointError(f"{manifest_path}: file {name!r} is not a plain file name inside the checkpoint folder")


def listed_file(directory: Path, manifest_path: Path, name: str, expected) -> Path:
    """The path of a file the manifest lists, which must exist and have a size and digest there."""
    path = directory / name
    if not path.exists():
        raise CheckpointError(f"{path}: missing (listed in {manifest_path.name})")
    if not isinstance(expected, dict) or not {"bytes", "xxh64"} <= expected.keys():
        raise CheckpointError(f"{path}: {manifest_path.name} gives no size and digest for it")
    return path


def verify_files(directory: Path, manifest_path: Path, manifest: dict) -> None:
    """Sizes and digests of the files this manifest vouches for, then every tensor it lists."""
    for name, expected in manifest["files"].items():
        path = listed_file(directory, manifest_path, name, expected)
        actual = file_digest(path)
        if actual["bytes"] != expected["bytes"]:
            raise CheckpointError(f"{path}: {actual['bytes']} bytes, manifest says {expected['bytes']} (truncated?)")
        if actual["xxh64"] != expected["xxh64"]:
            raise CheckpointError(f"{path}: content digest differs from {manifest_path.name} (corrupted)")
    by_file: dict[str, list[dict]] = {}
    for entry in manifest["tensors"]:
        by_file.setdefault(entry["file"], []).append(entry)
    for name, entries in by_file.items():
        path = directory / name
        header = tensorfile.read_header(path)  # CheckpointError naming the file when unreadable
        for entry in entries:
            if entry["key"] not in header:
                raise CheckpointError(f"{path}: has no tensor '{entry['key']}' that {manifest_path.name} lists")
            shape = header[entry["key"]]["shape"]
            expected = [entry["flat"][1] - entry["flat"][0]] if "flat" in entry else entry["shape"]
            if shape != expected:
                raise CheckpointError(f"{path}: tensor '{entry['key']}' has shape {shape}, "
                                      f"{manifest_path.name} says {expected}")


def check_entries(directory: Path, manifest_path: Path, manifest: dict) -> None:
    """What a manifest claims, checked without reading its files: each file's size, and for each
    format-2 tensor a known dtype, a byte span inside its file that fits its shape, and one digest
    slot per tile."""
    sizes = {}
    for name, expected in manifest["files"].items():
        path = listed_file(directory, manifest_path, name, expected)
        sizes[name] = path.stat().st_size
        if sizes[name] != expected["bytes"]:
            raise DamagedCheckpoint(f"{path}: {sizes[name]} bytes, manifest says {expected['bytes']} (truncated?)")
    for entry in manifest["tensors"]:
        if "span" not in entry:
            continue  # format 1: checked whole-file when first read
        path = directory / entry["file"]
        try:
            first, end = entry["span"]
            want = tensorfile.span_bytes(entry)
            slots = math.prod(tile_count(entry["shape"], entry["tile"]))
            digests = entry["digests"]
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"{path}: {manifest_path.name} entry '{entry.get('key')}' is malformed "
                                  f"({type(error).__name__}: {error})") from None
        if not 0 <= first <= end <= sizes[entry["file"]]:
            raise DamagedCheckpoint(f"{path}: tensor '{entry['key']}' at bytes {first}-{end} lies beyond the file "
                                    f"({sizes[entry['file']]} bytes; truncated?)")
        if end - first != want:
            raise CheckpointError(f"{path}: tensor '{entry['key']}' spans {end - first} bytes, {manifest_path.name} "
                                  f"says shape {entry['shape']} of {entry['dtype']} ({want} bytes)")
        if not isinstance(digests, list) or len(digests) != slots:
            raise CheckpointError(f"{path}: {manifest_path.name} gives {len(digests)} tile digests for "
                                  f"'{entry['key']}', its tile grid has {slots}")
