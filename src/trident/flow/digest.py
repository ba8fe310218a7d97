"""What a flow stage read and wrote, file by file: size and checksum (xxh3-128), so that a rerun notices a
replaced output or input even when its settings are the same.

A file whose size, mtime and inode are what an earlier digest recorded keeps that digest (a replaced file
has a new inode or mtime): a rerun rereads only what changed. A checkpoint's tensor files count by size:
their checksums are in the checkpoint's manifests, which are read whole.
"""
from __future__ import annotations

from pathlib import Path

import xxhash

TRUSTED_BY_MANIFEST = (".safetensors",)  # a checkpoint's manifest-rank*.json holds each one's digest


def _files(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".trident-"))
        elif path.is_file():
            found.append(path)
    return found


def _checksum(path: Path) -> str:
    digest = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def digest(paths: list[Path], root: Path, known: dict | None = None) -> dict[str, list]:
    """{path relative to `root` (absolute outside it): [size, mtime_ns, inode, checksum]} of every file at or
    under `paths`; `known` (an earlier digest) spares rereading a file whose size, mtime and inode it holds."""
    known, found = known or {}, {}
    for path in _files(paths):
        name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        stat = path.stat()
        mark = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
        if known.get(name, [None] * 3)[:3] == mark:
            found[name] = known[name]
            continue
        found[name] = mark + ["size" if path.suffix in TRUSTED_BY_MANIFEST else _checksum(path)]
    return found


def differences(before: dict, now: dict, limit: int = 3) -> str | None:
    """What changed between two digests, in a few words (None: the same sizes and checksums)."""
    changed = [n for n in before if n in now and [before[n][0], before[n][3]] != [now[n][0], now[n][3]]]
    said = [(changed, "replaced"), ([n for n in before if n not in now], "removed"),
            ([n for n in now if n not in before], "added")]
    parts = [f"{', '.join(names[:limit])}{f' and {len(names) - limit} more' if len(names) > limit else ''} {verb}"
             for names, verb in said if names]
    return "; ".join(parts) or None
