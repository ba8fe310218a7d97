"""Reading checkpoints of any layout (format.py describes the files): finding the newest complete
one, checking it, and assembling each tensor's slice for the layout that loads it.

Loading trusts only COMPLETE markers (`latest` is a convenience pointer for people and scripts).
Each parameter's slice is assembled from whichever files hold it, so the saving and loading layouts
need not match. Nothing is unpickled: tensors come from safetensors, the rest is JSON.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from trident.checkpoint import format as fmt
from trident.checkpoint.folders import complete_checkpoints, read_trainer_state, resolve_checkpoint  # noqa: F401
from trident.checkpoint.integrity import CheckpointError, check_entries, read_manifest, verify_files
from trident.checkpoint.slices import SliceSource
from trident.checkpoint.tensorfile import read_tensors
from trident.parallel.state import ADAM_KINDS, StatePiece, by_kind, weight_pieces
from trident.text.storage import location


class CheckpointReader:
    """Reads any saved tensor's slice, whatever layout wrote it, reading only the tiles that hold it."""

    def __init__(self, path: Path, verify: str | bool = "all"):
        """Reads every manifest and checks its claims against the files' sizes (no file is read).
        `verify="all"` (or True) also checks every file's digest now, so a truncated or corrupted
        checkpoint is refused before anything is loaded; `verify="loaded"` leaves each tile to be
        checked when it is read (what resume, eval and export use: a rank reads only its slices).
        Either way, a damaged tile that is read is refused (DamagedCheckpoint naming the file)."""
        self.path = location(path)
        if verify not in ("all", "loaded", True):
            raise ValueError(f"verify={verify!r}: 'all' or 'loaded'")
        if not (self.path / fmt.COMPLETE).exists():
            raise FileNotFoundError(f"{self.path} is not a complete checkpoint (no {fmt.COMPLETE} marker)")
        self.entries: dict[tuple[str, str], list[dict]] = {}
        manifests = sorted(self.path.glob(fmt.manifest_file("*")))
        if not manifests:
            raise CheckpointError(f"{self.path}: no manifest-rank*.json files")
        file_digests, verified = {}, set()
        for manifest_path in manifests:
            manifest = read_manifest(manifest_path)
            fmt.check_version(manifest, manifest_path)
            check_entries(self.path, manifest_path, manifest)
            if verify != "loaded":
                verify_files(self.path, manifest_path, manifest)
                verified |= set(manifest["files"])
            file_digests |= {name: (manifest_path.name, d) for name, d in manifest["files"].items()}
            for entry in manifest["tensors"]:
                entry = entry if manifest.get("format_version", 1) > 1 else _format1_entry(entry)
                self.entries.setdefault((entry["kind"], entry["name"]), []).append(
                    entry | {"manifest": manifest_path.name})
        self.state = read_trainer_state(self.path / fmt.TRAINER_STATE)
        self.source = SliceSource(self.path, file_digests, verified)

    def names(self, kind: str = "model") -> list[str]:
        return sorted({name for k, name in self.entries if k == kind})

    def full_shape(self, name: str, kind: str = "model") -> tuple[int, ...]:
        return tuple(self._pieces(kind, name)[0]["full_shape"])

    def _pieces(self, kind: str, name: str) -> list[dict]:
        if (kind, name) not in self.entries:
            raise KeyError(f"checkpoint {self.path} has no {kind} tensor '{name}'")
        return self.entries[(kind, name)]

    def read(self, name: str, kind: str = "model", offsets: list[int] | None = None,
             shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """The slice [offsets, offsets + shape) of the full tensor (the whole tensor by default), in fp32."""
        blocks = self._blocks(kind, name)
        full = tuple(blocks[0][0]["full_shape"])
        offsets = list(offsets or [0] * len(full))
        shape = tuple(shape or full)
        out = torch.empty(shape, dtype=torch.float32)
        covered = 0
        for pieces in blocks:
            region = self._overlap(pieces[0], offsets, shape)
            if region is None:
                continue
            local = [(lo - p, hi - p) for (lo, hi), p in zip(region, pieces[0]["offsets"])]
            part_shape = tuple(hi - lo for lo, hi in region)
            whole = part_shape == shape  # one block holds all of it: read straight into the result
            part = out if whole else torch.empty(part_shape, dtype=torch.float32)
            for piece in pieces:  # disjoint: one whole block, or ZeRO ranges of it
                covered += self.source.read_into(piece, local, part)
            if not whole:
                out[tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(region, offsets))] = part
        if covered != out.numel():
            raise CheckpointError(f"checkpoint {self.path}: {kind} tensor '{name}' slice {offsets}+{list(shape)} is "
                             f"not fully covered by the saved shards ({covered} of {out.numel()} elements)")
        return out

    def read_flat(self, name: str, kind: str, offsets: list[int], shape: tuple[int, ...], lo: int, hi: int):
        """Elements [lo, hi) of the flattened slice [offsets, offsets + shape): read as at most three
        row-aligned rectangles (ZeRO owns flat ranges), so no more of the slice is read than needed."""
        shape = tuple(shape)
        if len(shape) != 2:  # 1-D (or more than 2-D: whole rows) slices
            if len(shape) == 1:
                return self.read(name, kind, [offsets[0] + lo], (hi - lo,))
            return self.read(name, kind, offsets, shape).flatten()[lo:hi]
        width, parts = shape[1], []
        for row, first, end in _row_pieces(lo, hi, width):
            rows = (end - first) // width if first % width == 0 and (end - first) % width == 0 else 1
            region = [offsets[0] + row, offsets[1] + (first - row * width if rows == 1 else 0)]
            parts.append(self.read(name, kind, region, (rows, (end - first) // rows)).flatten())
        return torch.cat(parts) if parts else torch.empty(0)

    def _blocks(self, kind: str, name: str) -> list[list[dict]]:
        """The pieces of each saved block of the full tensor (a block: one rank's TP shard; its pieces:
        the whole block, or the ZeRO flat ranges of it). Replicas are read once: the first copy of a
        block (tied copies), one piece per flat range (ranges saved twice)."""
        groups: dict[tuple, list[dict]] = {}
        for piece in self._pieces(kind, name):
            key = (tuple(piece["offsets"]), tuple(piece["shape"]), piece.get("copy", ""))
            groups.setdefault(key, []).append(piece)
        blocks, seen_blocks = [], set()
        for (offsets, shape, _), pieces in groups.items():
            if (offsets, shape) in seen_blocks:
                continue
            seen_blocks.add((offsets, shape))
            ranges, unique = set(), []
            for piece in pieces:
                flat = tuple(piece.get("flat", ()))
                if flat not in ranges:
                    ranges.add(flat)
                    unique.append(piece)
            blocks.append(unique)
        return blocks

    @staticmethod
    def _overlap(piece: dict, offsets: list[int], shape: tuple) -> list[tuple[int, int]] | None:
        region = []
        for p_off, p_len, off, length in zip(piece["offsets"], piece["shape"], offsets, shape):
            lo, hi = max(p_off, off), min(p_off + p_len, off + length)
            if lo >= hi:
                return None
            region.append((lo, hi))
        return region

    def rng(self, rank: int) -> dict[str, torch.Tensor] | None:
        """This rank's RNG streams (None when the checkpoint has none for it); the file's digest is checked."""
        file = fmt.rng_file(rank)
        if not (self.path / file).exists() or file not in self.source.file_digests:
            return None
        self.source.verify_file(file)
        return read_tensors(self.path / file)

    @torch.no_grad()
    def fill(self, pieces: list[StatePiece], layout: dict | None = None, rank: int = 0, model_config=None,
             strict: bool = True) -> list[StatePiece]:
        """Load state pieces (parallel/state.py records, for any layout) from this checkpoint and return
        those loaded: weight and Adam pieces are filled in place with their slice (an fp32 master from
        the saved master, else from the saved weights); RNG pieces get this rank's saved streams when
        `layout` is the saved one (otherwise they are left out); scaler and trainer pieces get their
        trainer_state.json values. Weights are checked first (`check_weights`)."""
        self.check_weights(by_kind(pieces, "weight"), model_config, strict)
        master_kind = "master" if self.names("master") else "model"
        streams = self.rng(rank) if layout is not None and self.state.get("layout") == layout else None
        loaded = []
        for piece in pieces:
            if piece.kind == "weight" and piece.flat is not None:  # a ZeRO-3 rank's owned part
                saved = self.read_flat(piece.name, "model", list(piece.offsets), piece.shape, *piece.flat)
                piece.tensor.copy_(saved.to(piece.tensor.dtype))
            elif piece.kind == "weight":
                saved = self.read(piece.name, "model", list(piece.offsets), piece.shape)
                piece.tensor.copy_(saved.to(piece.tensor.dtype))
            elif piece.kind in ADAM_KINDS:
                kind = master_kind if piece.kind == "master" else piece.kind
                piece.tensor.copy_(self.read_flat(piece.name, kind, list(piece.offsets), piece.shape, *piece.flat))
            elif piece.kind == "rng":
                if streams is None or piece.name not in streams:
                    continue
                piece.tensor = streams[piece.name]
            else:
                piece.value = self.state[piece.name]
            loaded.append(piece)
        return loaded

    def check_weights(self, pieces: list[StatePiece], model_config=None, strict: bool = True) -> None:
        """Refuse weights this checkpoint lacks or holds at another full shape. With `strict`, a saved
        tensor the whole model lacks is refused too; the pieces are taken as the whole model unless
        `model_config` (of the model they are a stage or shard of) is given."""
        saved = set(self.names("model"))
        for piece in pieces:
            if piece.name not in saved:
                raise CheckpointError(f"{self.path}: no tensor '{piece.name}' for this model (was it saved from a "
                                      f"model with another model.num_layers?)")
            if self.full_shape(piece.name) != tuple(piece.full_shape):
                raise CheckpointError(f"{self.path}: '{piece.name}' has full shape "
                                      f"{list(self.full_shape(piece.name))}, this model needs "
                                      f"{list(piece.full_shape)} (model config differs)")
        if strict and pieces:
            expected = whole_model_names(model_config) if model_config is not None else {p.name for p in pieces}
            leftover = sorted({name for kind, name in self.entries} - expected)
            if leftover:
                raise CheckpointError(f"{self.path}: holds tensor '{leftover[0]}' ({len(leftover)} in all) but this "
                                      f"model has no such parameter (saved from a larger model? pass strict=False "
                                      f"to load a part)")

    def close(self) -> None:
        self.source.close()


def _format1_entry(entry: dict) -> dict:
    """A format-1 entry (no span, dtype or tile digests): located through its file's header on first read."""
    return {key: value for key, value in entry.items() if key not in ("span", "dtype", "tile", "digests")}


def _row_pieces(lo: int, hi: int, width: int):
    """[lo, hi) of a row-major matrix of `width` columns as (row, first, end): a partial first row,
    the whole rows between, a partial last row."""
    while lo < hi:
        row = lo // width
        if lo % width or hi - lo < width:
            end = min(hi, (row + 1) * width)
        else:
            end = lo + (hi - lo) // width * width
        yield row, lo, end
        lo = end


def whole_model_names(model_config) -> set[str]:
    """Every parameter name of the whole model `model_config` describes (all stages together)."""
    from trident.model.gpt import GPT

    return {name for name, _ in GPT(model_config, 1, device="meta").named_parameters()}


def load_for_inference(path: str | Path, device: str = "cpu"):
    """(model, tokenizer, config) from a checkpoint of any layout, as one process in eval mode."""
    from trident.config import config_from_dict
    from trident.data.tokenizer import Tokenizer
    from trident.model.gpt import GPT

    reader = CheckpointReader(resolve_checkpoint(str(path), location(path)) or location(path), verify="loaded")
    config = config_from_dict(reader.state["config"])
    tokenizer_file = reader.path / fmt.TOKENIZER
    tokenizer = Tokenizer.load(tokenizer_file) if tokenizer_file.exists() else None
    vocab = reader.full_shape("embedding.word.weight")[0]
    model = GPT(config.model, vocab)
    reader.fill(weight_pieces(list(model.named_parameters())))
    return model.to(device).eval(), tokenizer, config
