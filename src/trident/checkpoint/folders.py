"""Where checkpoints are and what they say about themselves, without loading torch (the launcher and
the config checks read them): the folder names, the COMPLETE marker, the trainer state, the model's
files; finding the newest complete checkpoint. format.py and reader.py re-export these."""
from __future__ import annotations

import json
from pathlib import Path

from trident.checkpoint.errors import CheckpointError
from trident.text.storage import location

# Version 1: fp32 weights beside the masters, whole-file digests only (read by verifying each file
# a rank touches, whole); checkpoints written before the field existed are version 1.
# Version 2: weights in the training dtype, per-tile digests and byte spans (a rank reads its slices).
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)

COMPLETE = "COMPLETE"
LATEST = "latest"
TRAINER_STATE = "trainer_state.json"
TOKENIZER = "tokenizer.json"
# The files that describe a model besides its tensors, carried byte for byte from the checkpoint a run
# starts from into each checkpoint it writes, and shipped by export-hf: the model's tokenizer and, for
# a Hugging Face import, its own config.json (kept as hf_config.json) and tokenizer side files.
MODEL_FILES = (TOKENIZER, "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
               "generation_config.json", "vocab.json", "merges.txt", "hf_config.json")


def step_dir(root: Path, step: int) -> Path:
    return location(root) / f"step_{step:07d}"


def step_of(path: Path) -> int:
    """The step a step_NNNNNNN folder holds."""
    return int(location(path).name.split("_")[1])


def check_version(document: dict, source: Path) -> None:
    """Refuse a manifest or trainer state of a format this code cannot read (missing means 1)."""
    version = document.get("format_version", 1)
    if version not in READABLE_VERSIONS:
        raise CheckpointError(f"{source}: checkpoint format version {version!r}; this trident reads version(s) "
                              f"{', '.join(map(str, READABLE_VERSIONS))} (written by a newer trident?)")


def complete_checkpoints(root: Path) -> list[Path]:
    """Finished checkpoints under `root`, oldest first (folders without COMPLETE are ignored)."""
    root = location(root)
    if not root.exists():
        return []
    found = [p for p in root.glob("step_*") if p.is_dir() and (p / COMPLETE).exists()]
    return sorted(found, key=step_of)


def resolve_checkpoint(load: str, root: Path) -> Path | None:
    """`auto`: the newest complete checkpoint under root (None if there is none); else the given path."""
    if not load:
        return None
    if load == "auto":
        found = complete_checkpoints(root)
        return found[-1] if found else None
    path = location(load)
    if (path / COMPLETE).exists():
        return path
    found = complete_checkpoints(path) or complete_checkpoints(path / "checkpoints")  # a run's OUT works too
    if found:
        return found[-1]
    raise FileNotFoundError(f"checkpoint.load={load}: no complete checkpoint there (missing {COMPLETE} marker)")


def read_trainer_state(path: Path) -> dict:
    """trainer_state.json, refused (CheckpointError) when unreadable or of an unknown format version."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable trainer state ({type(error).__name__}: {error})") from None
    check_version(state, path)
    return state
