"""The model a run starts from: `trident train CONFIG checkpoint.load=CKPT` trains the checkpoint's
model as it is. Its stored model section replaces the config's (a preset's model keys included); a
model key the user typed that contradicts it is refused naming the key and both values. Only the
training sequence (up to the model's positions) and dropout may be chosen anew (TRAINING_CHOICE_KEYS).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from trident.checkpoint import folders as fmt  # torch-free: the launcher adopts the model too
from trident.checkpoint.folders import read_trainer_state, resolve_checkpoint
from trident.config import Config, ConfigError, ModelConfig, fill
from trident.config.model import TRAINING_CHOICE_KEYS
from trident.data.tokenizer import Tokenizer
from trident.text.storage import location, make_folder


def start_checkpoint(load: str, root) -> Path | None:
    """The complete checkpoint `checkpoint.load` names (auto: the newest under root), or None: no
    load, nothing to resume yet, or a path that holds none (the trainer says so when it loads)."""
    try:
        return resolve_checkpoint(load, location(root))
    except FileNotFoundError:
        return None


def stored_model(path: Path) -> ModelConfig:
    """The checkpoint's model section, or ConfigError by key when it stores none."""
    state = read_trainer_state(path / fmt.TRAINER_STATE)
    tree = (state.get("config") or {}).get("model")
    if not tree:
        raise ConfigError(f"config key 'checkpoint.load': {path} stores no model config (written by an older "
                          f"trident); give every model.* key it was trained with")
    return fill(ModelConfig(), tree, "model.")


def adopt_checkpoint_model(config: Config, given: dict, root) -> Path | None:
    """Put the model of the checkpoint the run starts from into `config` (None: no checkpoint to start
    from, the config's model stands). `given`: the model keys the user typed (config.given_model_keys)."""
    path = start_checkpoint(config.checkpoint.load, root)
    if path is not None:
        adopt_model(config, stored_model(path), given, f"the checkpoint the run starts from ({path})")
    return path


def adopt_model(config: Config, model: ModelConfig, given: dict, where: str) -> None:
    """`model` into config.model, but for the training choices the user typed; a typed architecture key
    that contradicts it raises ConfigError naming the key, both values and `where` the model is from."""
    typed = fill(ModelConfig(), given, "model.")
    if "seq_length" in given and typed.seq_length != model.seq_length and not model.max_positions:
        model.max_positions = model.seq_length  # pinned: another training sequence keeps the model's positions
    for key in given:
        ours, theirs = getattr(typed, key), getattr(model, key)
        if key not in TRAINING_CHOICE_KEYS and ours != theirs:
            raise ConfigError(f"config key 'model.{key}': {ours!r} contradicts {where}, whose model has "
                              f"{key}={theirs!r}; leave the key out to train that model")
    for field in dataclasses.fields(ModelConfig):
        if not (field.name in given and field.name in TRAINING_CHOICE_KEYS):
            setattr(config.model, field.name, getattr(model, field.name))


def model_files(path: Path | None) -> dict[str, Path]:
    """The model's files (fmt.MODEL_FILES: its tokenizer, HF side files) in checkpoint `path`."""
    if path is None:
        return {}
    return {name: path / name for name in fmt.MODEL_FILES if (path / name).is_file()}


def model_tokenizer(files: dict[str, Path], given: str, out) -> tuple:
    """(tokenizer, its tokenizer.json to ship in checkpoints): the model's own (in `files`, from the
    checkpoint the run starts from), else data.tokenizer `given`; a `given` that is not the model's is
    refused by fingerprint, naming both files."""
    own = files.get(fmt.TOKENIZER)
    tokenizer = Tokenizer.load(own or given)
    if own and given:
        other = Tokenizer.load(given)
        if other.fingerprint() != tokenizer.fingerprint():
            raise ConfigError(f"config key 'data.tokenizer': {other.source} (fingerprint {other.fingerprint()[:16]}, "
                              f"{other.vocab_size} tokens) is not the tokenizer of the model the run starts from, "
                              f"{own} (fingerprint {tokenizer.fingerprint()[:16]}, {tokenizer.vocab_size} tokens); "
                              f"leave data.tokenizer out to use the model's")
    return tokenizer, own or _tokenizer_json(given, tokenizer, out)


def _tokenizer_json(source: str, tokenizer, out) -> Path:
    """A tokenizer.json to ship inside checkpoints (converted when the source is vocab/merges)."""
    path = location(source)
    if path.is_file() and path.suffix == ".json":
        return path
    if (path / fmt.TOKENIZER).exists():
        return path / fmt.TOKENIZER
    tokenizer.save(make_folder(out) / fmt.TOKENIZER)
    return out / fmt.TOKENIZER
