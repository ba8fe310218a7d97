"""The checkpoint format: folder layout, file names, manifest entries (from parallel/state.py's pieces), trainer state.

Layout of ROOT/step_0000100/ (format version 2):
  model-dp{d}-pp{p}-tp{t}.safetensors   this rank's model shards in the training dtype (bf16 weights
                                        of a bf16 run), keyed by global parameter name (DP rank 0)
  optim-dp{d}-pp{p}-tp{t}.safetensors   fp32 Adam state, and the fp32 masters when training in
                                        bf16/fp16, of the flat ranges this rank owns
                                        ("name/exp_avg/START", ...): every value is stored once
  rng-rank{r}.safetensors               every rank's RNG streams (for exact resume)
  manifest-rank{r}.json                 per tensor: file, key, global name, kind, full shape, slice
                                        offsets (+ flat range of a ZeRO piece), dtype, byte span in
                                        its file, tile grid and one xxh64 per tile (tiles.py);
                                        per file: size and digest; the format version
  trainer_state.json                    step, consumed samples/tokens, scaler, config, layout,
                                        the format version (rank 0)
  tokenizer.json, ... (MODEL_FILES)     the model's tokenizer and Hugging Face side files, when it has them
  COMPLETE                              written last; a folder without it is never loaded
ROOT/latest names the newest step folder (a convenience for people and scripts).
Nothing is pickled: tensors are safetensors, the rest is JSON.
"""
from __future__ import annotations

from pathlib import Path


import trident
from trident.checkpoint.folders import (COMPLETE, FORMAT_VERSION, LATEST, MODEL_FILES, READABLE_VERSIONS,  # noqa: F401
                                        TOKENIZER, TRAINER_STATE, check_version, step_dir, step_of)
from trident.parallel.state import StatePiece
from trident.text.storage import location

def rank_tag(mesh) -> str:
    """A rank's place in its layout, naming its files (cp only when the layout has context parallelism)."""
    cp = f"-cp{mesh.cp_rank}" if mesh.cp > 1 else ""
    return f"dp{mesh.dp_rank}-pp{mesh.pp_rank}{cp}-tp{mesh.tp_rank}"


def model_file(mesh) -> str:
    return f"model-{rank_tag(mesh)}.safetensors"


def optim_file(mesh) -> str:
    return f"optim-{rank_tag(mesh)}.safetensors"


def rng_file(rank: int) -> str:
    return f"rng-rank{rank}.safetensors"


def manifest_file(rank: int | str) -> str:
    return f"manifest-rank{rank}.json"


def done_marker(rank: int | str) -> str:
    """Dropped by a rank once its files of a save in progress are written ("*": any rank's)."""
    return f"done-rank{rank}"


def build_trainer_state(*, step: int, consumed_samples: int, consumed_tokens: int, config, **extra) -> dict:
    """What trainer_state.json holds besides the model's own values (the writer adds the scaler and
    optimizer step count from the model's state pieces, and the layout and version). `config` is a
    Config; `extra` keys are kept as given."""
    return {"step": step, "consumed_samples": consumed_samples, "consumed_tokens": consumed_tokens,
            "config": config.to_dict(), "trident_version": trident.__version__} | extra


def model_entry(file: str, piece: StatePiece) -> dict:
    """Manifest entry for a weight shard saved under its global name: whole, or (ZeRO-3) the flat range
    of it this rank owns."""
    entry = {"file": file, "key": piece.name, "name": piece.name, "kind": "model", "full_shape": list(piece.full_shape),
             "offsets": list(piece.offsets), "shape": list(piece.shape)}
    return entry | ({"flat": list(piece.flat)} if piece.flat is not None else {})


def optimizer_key(piece: StatePiece) -> str:
    return f"{piece.name}/{piece.kind}/{piece.flat[0]}"


def optimizer_entry(file: str, piece: StatePiece, copy: str) -> dict:
    """Manifest entry for one Adam piece; `copy` keeps tied copies apart."""
    return {"file": file, "key": optimizer_key(piece), "name": piece.name, "kind": piece.kind,
            "full_shape": list(piece.full_shape), "offsets": list(piece.offsets), "shape": list(piece.shape),
            "flat": list(piece.flat), "copy": copy}


def manifest(rank: int, entries: list[dict], files: dict[str, dict]) -> dict:
    """One rank's manifest: its tensor entries and its files' sizes and digests."""
    return {"format_version": FORMAT_VERSION, "rank": rank, "tensors": entries, "files": files}
