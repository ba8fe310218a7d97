"""Reading checkpoints of any layout (format.py describes the files): finding the newest complete
one, checking it, and assembling each tensor's slice for the layout that loads it.

Loading trusts only COMPLETE markers (`latest` is a convenience pointer for people and scripts).
Each parameter's slice is assembled from whichever files hold it, so the saving and loading layouts
need not match. Nothing is unpickled: tensors come from safetensors, the rest is JSON.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors import safe_open

from trident.checkpoint import format as fmt
from trident.checkpoint.integrity import CheckpointError, read_manifest, verify_files
from trident.checkpoint.state import owned_slices
from trident.parallel.sharding import full_shape, shard_offsets


def complete_checkpoints(root: Path) -> list[Path]:
    """Finished checkpoints under `root`, oldest first (folders without COMPLETE are ignored)."""
    root = Path(root)
    if not root.exists():
        return []
    found = [p for p in root.glob("step_*") if p.is_dir() and (p / fmt.COMPLETE).exists()]
    return sorted(found, key=fmt.step_of)


def resolve_checkpoint(load: str, root: Path) -> Path | None:
    """`auto`: the newest complete checkpoint under root (None if there is none); else the given path."""
    if not load:
        return None
    if load == "auto":
        found = complete_checkpoints(root)
        return found[-1] if found else None
    path = Path(load)
    if (path / fmt.COMPLETE).exists():
        return path
    found = complete_checkpoints(path) or complete_checkpoints(path / "checkpoints")  # a run's OUT works too
    if found:
        return found[-1]
    raise FileNotFoundError(f"checkpoint.load={load}: no complete checkpoint there (missing {fmt.COMPLETE} marker)")


def open_checkpoint(load: str, root: Path, log=print) -> "CheckpointReader | None":
    """The checkpoint `load` names, opened and verified. With `auto`, a damaged newest checkpoint
    is skipped (one line to `log` saying which and why) for the newest one that verifies; a path
    given explicitly is opened as is, and fails (CheckpointError) if it does not verify."""
    if load != "auto":
        path = resolve_checkpoint(load, root)
        return CheckpointReader(path) if path is not None else None
    found = complete_checkpoints(root)
    for path in reversed(found):
        try:
            return CheckpointReader(path)
        except CheckpointError as error:
            log(f"checkpoint {path.name} skipped, an older one is tried: {error}")
    if found:
        raise CheckpointError(f"checkpoint.load=auto: no checkpoint under {root} verifies "
                              f"({len(found)} complete, all damaged; see the lines above)")
    return None


def read_trainer_state(path: Path) -> dict:
    """trainer_state.json, refused (CheckpointError) when unreadable or of an unknown format version."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable trainer state ({type(error).__name__}: {error})") from None
    fmt.check_version(state, path)
    return state


class CheckpointReader:
    """Reads any saved tensor's slice, whatever layout wrote it."""

    def __init__(self, path: Path, verify: bool = True):
        """Refuses (CheckpointError naming the file) an incomplete, truncated or corrupted
        checkpoint, or one whose manifests do not match its files, before anything is loaded."""
        self.path = Path(path)
        if not (self.path / fmt.COMPLETE).exists():
            raise FileNotFoundError(f"{self.path} is not a complete checkpoint (no {fmt.COMPLETE} marker)")
        self.entries: dict[tuple[str, str], list[dict]] = {}
        manifests = sorted(self.path.glob(fmt.manifest_file("*")))
        if not manifests:
            raise CheckpointError(f"{self.path}: no manifest-rank*.json files")
        for manifest_path in manifests:
            manifest = read_manifest(manifest_path)
            fmt.check_version(manifest, manifest_path)
            if verify:
                verify_files(self.path, manifest_path, manifest)
            for entry in manifest["tensors"]:
                self.entries.setdefault((entry["kind"], entry["name"]), []).append(entry)
        self.state = read_trainer_state(self.path / fmt.TRAINER_STATE)
        self._handles: dict = {}

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
        """The slice [offsets, offsets + shape) of the full tensor (the whole tensor by default)."""
        blocks = self._blocks(kind, name)
        full = tuple(blocks[0]["full_shape"])
        offsets = offsets or [0] * len(full)
        shape = tuple(shape or full)
        out = torch.empty(shape, dtype=torch.float32)
        covered = 0
        seen = set()
        for block in blocks:
            region = self._overlap(block, offsets, shape)
            key = (tuple(block["offsets"]), tuple(block["shape"]))
            if region is None or key in seen:  # identical replicas (e.g. tied copies) are read once
                continue
            seen.add(key)
            src_index = tuple(slice(lo - p, hi - p) for (lo, hi), p in zip(region, block["offsets"]))
            dst_index = tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(region, offsets))
            out[dst_index] = block["load"](src_index)
            covered += math.prod(hi - lo for lo, hi in region)
        if covered != out.numel():
            raise ValueError(f"checkpoint {self.path}: {kind} tensor '{name}' slice {offsets}+{list(shape)} is "
                             f"not fully covered by the saved shards ({covered} of {out.numel()} elements)")
        return out

    def _blocks(self, kind: str, name: str) -> list[dict]:
        """Rectangular blocks of the full tensor, each with a loader; ZeRO-1 pieces (flat ranges of
        one TP-local block, spread over DP ranks) are joined back into their block first."""
        blocks, flat_groups = [], {}
        for piece in self._pieces(kind, name):
            if "flat" in piece:
                key = (tuple(piece["offsets"]), tuple(piece["shape"]), piece.get("copy", ""))
                flat_groups.setdefault(key, []).append(piece)
            else:
                blocks.append(piece | {"load": self._file_loader(piece)})
        for (offsets, shape, _), pieces in flat_groups.items():
            blocks.append({"offsets": list(offsets), "shape": list(shape), "full_shape": pieces[0]["full_shape"],
                           "load": self._flat_loader(kind, name, shape, pieces)})
        return blocks

    def _open(self, file: str):
        """One open (memory-mapped) handle per shard file for the reader's lifetime."""
        if file not in self._handles:
            self._handles[file] = safe_open(self.path / file, framework="pt")
        return self._handles[file]

    def _file_loader(self, piece: dict):
        def load(index):
            handle = self._open(piece["file"])
            return handle.get_slice(piece["key"])[index] if index else handle.get_tensor(piece["key"])
        return load

    def _flat_loader(self, kind: str, name: str, shape: tuple, pieces: list[dict]):
        def load(index):
            flat = torch.empty(math.prod(shape), dtype=torch.float32)
            filled, seen = 0, set()
            for piece in pieces:
                if tuple(piece["flat"]) in seen:  # the same range saved by two replicas
                    continue
                seen.add(tuple(piece["flat"]))
                lo, hi = piece["flat"]
                flat[lo:hi] = self._open(piece["file"]).get_tensor(piece["key"])
                filled += hi - lo
            if filled != flat.numel():
                raise ValueError(f"checkpoint {self.path}: {kind} of '{name}' has {filled} of {flat.numel()} "
                                 f"elements across its ZeRO slices")
            return flat.view(shape)[index]
        return load

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
        path = self.path / fmt.rng_file(rank)
        if not path.exists():
            return None
        with safe_open(path, framework="pt") as handle:
            return {key: handle.get_tensor(key) for key in handle.keys()}


def whole_model_names(model_config) -> set[str]:
    """Every parameter name of the whole model `model_config` describes (all stages together)."""
    from trident.model.gpt import GPT

    return {name for name, _ in GPT(model_config, 1, device="meta").named_parameters()}


@torch.no_grad()
def load_model_weights(reader: CheckpointReader, named_params: list, model_config=None, strict: bool = True) -> None:
    """Copy each parameter's slice (as this layout shards it) from the checkpoint, after checking
    that the checkpoint holds every parameter at this model's full shape. With `strict`, a saved
    tensor the whole model lacks is refused too; `named_params` is taken as the whole model unless
    `model_config` (of the model these parameters are a stage or shard of) is given."""
    saved = set(reader.names("model"))
    for name, param in named_params:
        if name not in saved:
            raise CheckpointError(f"{reader.path}: no tensor '{name}' for this model (was it saved from a "
                                  f"model with another model.num_layers?)")
        if reader.full_shape(name) != full_shape(param):
            raise CheckpointError(f"{reader.path}: '{name}' has full shape {list(reader.full_shape(name))}, this "
                                  f"model needs {list(full_shape(param))} (model config differs)")
    if strict:
        expected = whole_model_names(model_config) if model_config is not None else {n for n, _ in named_params}
        leftover = sorted({name for kind, name in reader.entries} - expected)
        if leftover:
            raise CheckpointError(f"{reader.path}: holds tensor '{leftover[0]}' ({len(leftover)} in all) but this "
                                  f"model has no such parameter (saved from a larger model? pass strict=False "
                                  f"to load a part)")
    for name, param in named_params:
        param.copy_(reader.read(name, "model", shard_offsets(param), tuple(param.shape)).to(param.dtype))


@torch.no_grad()
def load_optimizer(reader: CheckpointReader, named_params: list, buffers, optimizer, steps: int) -> None:
    """Fill the owned ranges from a checkpoint of any layout (fp32 master from the saved master if
    there is one, else from the saved fp32 weights)."""
    master_kind = "master" if reader.names("master") else "model"
    for name, param, i, in_param, in_range in owned_slices(named_params, buffers, optimizer):
        offsets, shape = shard_offsets(param), tuple(param.shape)

        def flat(kind: str) -> torch.Tensor:
            return reader.read(name, kind, offsets, shape).flatten()[in_param]

        optimizer.exp_avg[i][in_range] = flat("exp_avg")
        optimizer.exp_avg_sq[i][in_range] = flat("exp_avg_sq")
        if optimizer.separate_master:
            optimizer.master[i][in_range] = flat(master_kind)
    optimizer.steps = steps


def load_for_inference(path: str | Path, device: str = "cpu"):
    """(model, tokenizer, config) from a checkpoint of any layout, as one process in eval mode."""
    from trident.config import config_from_dict
    from trident.data.tokenizer import Tokenizer
    from trident.model.gpt import GPT

    reader = CheckpointReader(resolve_checkpoint(str(path), Path(path)) or Path(path))
    config = config_from_dict(reader.state["config"])
    tokenizer_file = reader.path / fmt.TOKENIZER
    tokenizer = Tokenizer.load(tokenizer_file) if tokenizer_file.exists() else None
    vocab = reader.full_shape("embedding.word.weight")[0]
    model = GPT(config.model, vocab)
    load_model_weights(reader, list(model.named_parameters()))
    return model.to(device).eval(), tokenizer, config
