"""A flow that continues an open model (`train: {from: HF_DIR_OR_CHECKPOINT}`, docs/open-models.md): the
model's own tokenizer tokenizes the curated text (no tokenizer is trained), training starts from its
weights (a Hugging Face folder is imported into OUT/start first), and the report sets the model's
scores before (the base model) beside those after (the continued one)."""
from __future__ import annotations

from pathlib import Path

from trident.flow.parsed import Flow, FlowConfigError

START = "start"  # OUT/start: the imported Hugging Face model's checkpoint


def continues(flow: Flow) -> bool:
    return bool(flow.train.from_)


def is_hf_folder(path: Path) -> bool:
    """A Hugging Face model folder (config.json, no trident checkpoint)."""
    return (path / "config.json").is_file() and not (path / "COMPLETE").exists()


def adopt_start_model(flow: Flow, config) -> None:
    """The training `config` with the starting model's model section (as `trident train` will take it
    from the checkpoint), at load, before any stage: a model trident cannot read, or a model key in
    train.overrides that contradicts it, raises naming the key."""
    from trident.checkpoint.model_config import adopt_model, start_checkpoint, stored_model
    from trident.config import given_model_keys
    from trident.infer.hf import read_hf_config
    from trident.infer.hf_config import trident_config

    path = Path(flow.train.from_)
    if is_hf_folder(path):
        try:
            model = trident_config(read_hf_config(path), path / "config.json", None, 0).model
        except ValueError as error:
            raise FlowConfigError(f"flow file key 'train.from': {error}") from None
    else:
        found = start_checkpoint(str(path), path) if path.is_dir() else None
        if found is None:
            raise FlowConfigError(f"flow file key 'train.from': {path} is neither a Hugging Face model folder "
                                  f"(config.json + model.safetensors) nor a trident checkpoint (step_N/ with "
                                  f"COMPLETE, or a folder of them)")
        model = stored_model(found)
    adopt_model(config, model, given_model_keys(flow.train.config, flow.train.overrides), f"train.from ({path})")


def start_checkpoint(flow: Flow, out: Path) -> Path:
    """The checkpoint training starts from: OUT/start's import of a Hugging Face folder, or the one given."""
    from trident.checkpoint.format import step_dir
    from trident.checkpoint.reader import resolve_checkpoint

    path = Path(flow.train.from_)
    if is_hf_folder(path):
        return step_dir(out / START, 0)  # where import-hf writes it
    return resolve_checkpoint(str(path), path)


def import_start(flow: Flow, out: Path) -> None:
    """Import the Hugging Face folder `train.from` into OUT/start (weights, model config, tokenizer)."""
    import shutil

    from trident.infer.hf import import_hf

    shutil.rmtree(out / START, ignore_errors=True)  # a half-written import of an earlier, interrupted run
    summary = import_hf(flow.train.from_, out / START)
    print(f"imported {flow.train.from_} ({summary['model_type']}, {summary['parameters']:,} parameters) "
          f"-> {summary['checkpoint']}")


def model_tokenizer(flow: Flow, out: Path) -> Path:
    return start_checkpoint(flow, out) / "tokenizer.json"
