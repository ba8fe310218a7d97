"""Reading a region of a saved block from the pieces that hold it, a band of tiles at a time: only
the tiles that overlap the region are read, and each is checked against its digest (format 2) as
it arrives. Format-1 pieces carry no tile digests: their file's digest is checked, whole, the first
time a piece of that file is read (tiles.py describes the grid).
"""
from __future__ import annotations

from pathlib import Path

import torch

from trident.checkpoint import tensorfile
from trident.checkpoint.integrity import CheckpointError, DamagedCheckpoint, file_digest
from trident.checkpoint.tiles import Scratch, band_digests, band_rows, grid_shape, tile_count, tile_shape
from trident.text.storage import RangeReader


class SliceSource:
    """Open files of one checkpoint folder, and the format-1 files already verified."""

    def __init__(self, directory: Path, file_digests: dict[str, tuple[str, dict]], verified: set[str] = frozenset()):
        self.directory = directory
        self.file_digests = file_digests  # file -> (its manifest's name, {"bytes", "xxh64"})
        self.verified = set(verified)  # files whose whole digest was checked: their tiles need no check
        self.handles: dict[str, object] = {}
        self.headers: dict[str, dict] = {}
        self.scratch = Scratch()

    def handle(self, file: str):
        if file not in self.handles:
            self.handles[file] = RangeReader(self.directory / file)
        return self.handles[file]

    @property
    def bytes_read(self) -> int:
        """Bytes read so far from this checkpoint's tensor files (whole-file digest checks aside)."""
        return sum(handle.bytes_read for handle in self.handles.values())

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()

    def verify_file(self, file: str) -> dict:
        """The file's header, once its whole-file digest has been checked against its manifest."""
        if file not in self.headers:
            path = self.directory / file
            manifest, expected = self.file_digests[file]
            actual = file_digest(path)
            if actual["bytes"] != expected["bytes"]:
                raise DamagedCheckpoint(f"{path}: {actual['bytes']} bytes, {manifest} says {expected['bytes']} "
                                        f"(truncated?)")
            if actual["xxh64"] != expected["xxh64"]:
                raise DamagedCheckpoint(f"{path}: content digest differs from {manifest} (corrupted)")
            self.headers[file] = tensorfile.read_header(path)
        return self.headers[file]

    def locate(self, piece: dict) -> dict:
        """The piece with its data span and dtype: from the manifest (format 2), or from the file's
        header once the whole file's digest has been checked (format 1)."""
        if "span" in piece:
            return piece
        saved = self.verify_file(piece["file"]).get(piece["key"])
        if saved is None:
            raise CheckpointError(f"{self.directory / piece['file']}: has no tensor '{piece['key']}' that its "
                                  f"manifest lists")
        expected = [piece["flat"][1] - piece["flat"][0]] if "flat" in piece else piece["shape"]
        if saved["shape"] != expected:
            raise CheckpointError(f"{self.directory / piece['file']}: tensor '{piece['key']}' has shape "
                                  f"{saved['shape']}, its manifest says {expected}")
        return piece | {"span": saved["span"], "dtype": saved["dtype"]}

    def read_into(self, piece: dict, region: list[tuple[int, int]], out: torch.Tensor) -> int:
        """Copy the elements this piece holds of `region` (of its block, in block coordinates) into
        `out` (contiguous, the region's shape); returns how many it copied."""
        piece = self.locate(piece)
        shape = piece["shape"]
        rows, cols, inner = grid_shape(shape)
        size = tensorfile.element_size(piece["dtype"])
        tile = piece.get("tile") or tile_shape(shape, size)
        lo, hi = piece.get("flat", (0, rows * cols * inner))
        whole = (lo, hi) == (0, rows * cols * inner)
        (row_lo, row_hi), (col_lo, col_hi) = _rows_and_cols(region, shape, self.directory / piece["file"])
        groups = range(col_lo // tile[1], -(-col_hi // tile[1]))
        columns = (groups.start * tile[1], min(cols, groups.stop * tile[1]))
        out3, copied = out.view(row_hi - row_lo, col_hi - col_lo, inner), 0
        bands = [(band, *band_rows(shape, tile, band)) for band in range(row_lo // tile[0], -(-row_hi // tile[0]))]
        runs = {band: _runs(r0, r1, cols, inner, *columns, lo, hi) for band, r0, r1 in bands}
        handle, fetched = self.handle(piece["file"]), set()
        for band, r0, r1 in bands:
            if not runs[band]:
                continue
            if band not in fetched:  # object stores: the next bands' spans fetched concurrently
                fetched = _prefetch(handle, piece, runs, band, lo, size)
            if whole:
                values, held = self._read_whole_band(piece, runs[band], r0, r1, cols, inner), None
            else:
                values, held = self._read_band(piece, runs[band], r0, r1, cols, inner, lo, size)
            if "digests" in piece and piece["file"] not in self.verified:
                self._check(piece, band, values, held, tile, groups, shape)
            a, b = max(r0, row_lo), min(r1, row_hi)
            part, target = values[a - r0:b - r0, col_lo:col_hi], out3[a - row_lo:b - row_lo]
            if held is None:
                target.copy_(part)
                copied += part.numel()
            else:
                mask = held[a - r0:b - r0, col_lo:col_hi]
                target[mask] = part[mask].to(target.dtype)
                copied += int(mask.sum())
        return copied

    def _read_whole_band(self, piece, runs, r0, r1, cols, inner) -> torch.Tensor:
        """Band rows [r0, r1) of a whole block, the columns of `runs` read (the rest left unset)."""
        size = tensorfile.element_size(piece["dtype"])
        values = self.scratch.get("band", (r1 - r0) * cols * inner, tensorfile.TORCH_DTYPES[piece["dtype"]])
        start, handle = r0 * cols * inner, self.handle(piece["file"])
        for a, b in runs:  # one run per row, or one for the band when it is read full width
            tensorfile.read_into(handle, piece["span"][0] + a * size, values[a - start:b - start])
        return values.view(r1 - r0, cols, inner)

    def _read_band(self, piece, runs, r0, r1, cols, inner, lo, size):
        """Band rows [r0, r1) of a ZeRO piece: the runs it holds, with a mask of what they cover."""
        dtype = tensorfile.TORCH_DTYPES[piece["dtype"]]
        values = torch.zeros((r1 - r0) * cols * inner, dtype=dtype)
        held = torch.zeros(values.numel(), dtype=torch.bool)
        start, handle = r0 * cols * inner, self.handle(piece["file"])
        for a, b in runs:
            tensorfile.read_into(handle, piece["span"][0] + (a - lo) * size, values[a - start:b - start])
            held[a - start:b - start] = True
        return values.view(r1 - r0, cols, inner), held.view(r1 - r0, cols, inner)

    def _check(self, piece, band, values, held, tile, groups, shape) -> None:
        _, per_band = tile_count(shape, tile)
        actual = band_digests(values, held, tile[1], groups, self.scratch)
        for g, digest in zip(groups, actual):
            if digest != piece["digests"][band * per_band + g]:
                raise DamagedCheckpoint(
                    f"{self.directory / piece['file']}: tensor '{piece['key']}' ({piece['kind']} of '{piece['name']}'), "
                    f"tile ({band}, {g}): digest differs from {piece.get('manifest', 'its manifest')} (corrupted)")


PREFETCH_BYTES = 64 << 20  # bytes of spans fetched concurrently at a time from an object store


def _prefetch(handle, piece, runs: dict, first_band: int, lo: int, size: int) -> set:
    """Fetch, concurrently, the spans of bands from `first_band` on, up to PREFETCH_BYTES (at least
    one band); returns the bands fetched. Local files need no prefetch: their reads are served as
    they come."""
    if not handle.remote:
        return set(runs)
    spans, fetched, total = [], set(), 0
    for band in (b for b in runs if b >= first_band):
        if fetched and total >= PREFETCH_BYTES:
            break
        spans += [(piece["span"][0] + (a - lo) * size, (b - a) * size) for a, b in runs[band]]
        total += sum((b - a) * size for a, b in runs[band])
        fetched.add(band)
    handle.prefetch(spans)
    return fetched


def _rows_and_cols(region, shape, path) -> tuple[tuple[int, int], tuple[int, int]]:
    """The region as row and column ranges of the (rows, cols, inner) view; inner dims must be whole."""
    if not shape:
        return (0, 1), (0, 1)
    for (lo, hi), size in zip(region[2:], shape[2:]):
        if (lo, hi) != (0, size):
            raise CheckpointError(f"{path}: a slice of dims after the second is not supported (region {region})")
    return region[0], region[1] if len(shape) > 1 else (0, 1)


def _runs(r0, r1, cols, inner, first_col, end_col, lo, hi) -> list[tuple[int, int]]:
    """Block-flat element ranges of band rows [r0, r1) x columns [first_col, end_col) that the
    piece's flat range [lo, hi) holds, adjacent ranges joined (a full-width band is one range)."""
    runs: list[tuple[int, int]] = []
    for r in range(r0, r1):
        a, b = max(lo, (r * cols + first_col) * inner), min(hi, (r * cols + end_col) * inner)
        if a >= b:
            continue
        if runs and runs[-1][1] == a:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((a, b))
    return runs
