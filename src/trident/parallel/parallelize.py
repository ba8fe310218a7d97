"""The one place where a layout is applied to the model: this rank's model chunks for its
(pipeline stage, tensor rank), each a GPT over its slice of the layers, initialised by slicing the
seeded full-size initialisation. Used by the trainer and by parallel evaluation."""
from __future__ import annotations

import torch

from trident.config import Config, ConfigError
from trident.model.gpt import GPT, build_model
from trident.parallel.pipeline.schedules import partition_layers


def build_model_chunks(config: Config, mesh, device: torch.device, dtype: torch.dtype = torch.float32) -> list[GPT]:
    """One chunk per virtual stage held by this rank (one, unless the schedule is interleaved)."""
    cfg = config
    if cfg.model.vocab_size <= 0:
        raise ConfigError("config key 'model.vocab_size' is unknown: set it or give data.tokenizer")
    tp = mesh.tp_context(cfg.parallel.sequence_parallel)
    v = cfg.parallel.virtual_stages
    ranges = partition_layers(cfg.model.num_layers, mesh.pp, v, cfg.parallel.layer_partition)[mesh.pp_rank]
    chunks = []
    for c, layers in enumerate(ranges):
        chunk = build_model(cfg.model, cfg.model.padded_vocab_size(mesh.tp), cfg.train.seed, tp=tp, layers=layers,
                            pre_process=mesh.is_first_stage and c == 0, post_process=mesh.is_last_stage and c == v - 1,
                            activation_checkpointing=cfg.train.activation_checkpointing)
        chunk = chunk.to(device, dtype)
        if cfg.train.compile:  # per block: each compiles once and is reused by every layer of its shape
            for block in chunk.blocks.values():
                block.compile()
        chunks.append(chunk)
    return chunks
