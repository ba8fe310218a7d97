"""Export a trident checkpoint as a Hugging Face model folder (transformers loads it as is): GPT2LMHeadModel
for GPT blocks, LlamaForCausalLM for Llama-style ones (model.position=rope, norm=rmsnorm, mlp=swiglu).

Tensors are renamed, transposed and reordered as trident.infer.hf (hf_llama) describes, and written in
safetensors shards of at most `max_shard_bytes` (default 5 GB, as transformers' save_pretrained):
one `model.safetensors` when everything fits, else `model-0000i-of-0000n.safetensors` and
`model.safetensors.index.json` (weight_map + total_size). Shards are read, converted and written
one at a time, so a 530B export holds one shard in memory, not the model.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from trident.checkpoint.format import MODEL_FILES
from trident.infer.hf import WEIGHTS_FILE, WEIGHTS_INDEX, name_map, to_gpt2
from trident.infer.hf_config import HF_CONFIG, family_of, hf_config
from trident.infer.hf_llama import llama_tensors
from trident.text.storage import location, make_folder, require_local

MAX_SHARD_BYTES = 5 * 10**9


def _copy_model_files(ckpt: Path, out: Path) -> list[str]:
    """The model's own tokenizer and side files, byte for byte (a Hugging Face import's: its tokenizer
    is shipped as it came, never rebuilt)."""
    names = [name for name in MODEL_FILES if name != HF_CONFIG and (ckpt / name).is_file()]
    for name in names:
        (out / name).write_bytes((ckpt / name).read_bytes())
    return names


def _write_tokenizer(tokenizer, out: Path, seq_length: int) -> list[str]:
    """tokenizer.json, vocab.json + merges.txt and the small JSON files AutoTokenizer reads."""
    tokenizer.save(out / "tokenizer.json")
    tokenizer.save_gpt2_files(out)
    special = "<|endoftext|>"
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GPT2Tokenizer", "model_max_length": seq_length, "add_prefix_space": False,
         "bos_token": special, "eos_token": special, "unk_token": special}, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": special, "eos_token": special, "unk_token": special}, indent=1))
    return ["tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"]


def _as_umask_allows(path: Path) -> None:
    """safetensors writes its files 0600; an export is for others to read, as any file this user writes."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def plan_shards(sizes: dict[str, int], max_shard_bytes: int) -> list[list[str]]:
    """Tensor names in order, cut into shards of at most max_shard_bytes (a larger tensor alone)."""
    shards: list[list[str]] = [[]]
    used = 0
    for name, size in sizes.items():
        if shards[-1] and used + size > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    return shards


def _open_checkpoint(ckpt_path: str | Path):
    from trident.checkpoint.reader import CheckpointReader, resolve_checkpoint

    if not location(ckpt_path).is_dir():
        raise FileNotFoundError(f"{ckpt_path}: no such checkpoint folder")
    try:
        return CheckpointReader(resolve_checkpoint(str(ckpt_path), location(ckpt_path)), verify="loaded")
    except FileNotFoundError:
        raise FileNotFoundError(f"{ckpt_path}: neither a complete checkpoint (step_N/ with a COMPLETE marker) "
                                f"nor a folder holding one") from None


def _gpt2_tensors(cfg, vocab: int) -> list[tuple[str, str, Callable]]:
    """(HF name, trident name, conversion) of every GPT2LMHeadModel tensor."""
    return [(hf, trident, functools.partial(to_gpt2, kind=kind, num_heads=cfg.num_heads, vocab_size=vocab))
            for trident, hf, kind in name_map(cfg.num_layers)]


def _write_shards(reader, entries: list, out: Path, max_shard_bytes: int) -> tuple[list[str], int]:
    """Every HF tensor of `entries` (HF name, trident name, conversion) into its shard; (file names,
    parameter count). Sizes come from converting empty (meta) tensors of the checkpoint's shapes."""
    sizes = {hf: 4 * convert(torch.empty(reader.full_shape(trident), device="meta")).numel()  # fp32
             for hf, trident, convert in entries}
    shards = plan_shards(sizes, max_shard_bytes)
    files = [WEIGHTS_FILE] if len(shards) == 1 else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                                                   for i in range(len(shards))]
    by_name = {hf: (trident, convert) for hf, trident, convert in entries}
    last: dict[str, torch.Tensor] = {}  # q, k and v of a fused QKV come from one read
    for file, shard in zip(files, shards):
        tensors = {}
        for hf in shard:
            trident, convert = by_name[hf]
            if trident not in last:  # reader.read raises naming any missing tensor
                last = {trident: reader.read(trident)}
            tensors[hf] = convert(last[trident]).contiguous()
        save_file(tensors, out / file, metadata={"format": "pt"})
        _as_umask_allows(out / file)
    if len(shards) > 1:
        weight_map = {hf: file for file, shard in zip(files, shards) for hf in shard}
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
        (out / WEIGHTS_INDEX).write_text(json.dumps(index, indent=1))
        files.append(WEIGHTS_INDEX)
    return files, sum(sizes.values()) // 4


def export_hf(ckpt_path: str | Path, out_dir: str | Path, max_shard_bytes: int = MAX_SHARD_BYTES) -> dict:
    """Write OUT/config.json + the weights (+ tokenizer files) for transformers' GPT2LMHeadModel,
    LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM (hf_config.family_of).

    `ckpt_path` is a checkpoint folder of any parallel layout, or a folder of them (newest used).
    Returns a summary: files written, vocabulary sizes, parameter count."""
    from trident.config import config_from_dict
    from trident.data.tokenizer import Tokenizer

    reader = _open_checkpoint(ckpt_path)
    cfg = config_from_dict(reader.state["config"]).model
    tokenizer_file = reader.path / "tokenizer.json"
    tokenizer = Tokenizer.load(tokenizer_file) if tokenizer_file.exists() else None
    vocab = cfg.vocab_size or (tokenizer.vocab_size if tokenizer is not None else 0)
    padded = reader.full_shape("embedding.word.weight")[0]
    if not 0 < vocab <= padded or (tokenizer is not None and tokenizer.vocab_size > vocab):
        raise ValueError(f"{reader.path}: vocabulary of {vocab} tokens (tokenizer: "
                         f"{tokenizer.vocab_size if tokenizer else 'none'}) does not fit the embedding's {padded} rows")
    family = family_of(cfg)
    entries = _gpt2_tensors(cfg, vocab) if family == "gpt2" else llama_tensors(cfg, vocab)
    unexpected = sorted(set(reader.names()) - {t for _, t, _ in entries})
    if unexpected:
        raise ValueError(f"{reader.path}: tensors a {family} model has no place for: {', '.join(unexpected[:5])}")
    require_local(out_dir, "OUT", "safetensors writes local files; `trident export-hf` stages a URL OUT locally")
    out = make_folder(out_dir)
    files, parameters = _write_shards(reader, entries, out, max_shard_bytes)
    eod = tokenizer.eod_id if tokenizer is not None else None
    original = reader.path / HF_CONFIG
    original = json.loads(original.read_text()) if original.is_file() else None
    (out / "config.json").write_text(json.dumps(hf_config(cfg, vocab, eod, original), indent=1))
    files = ["config.json", *files]
    if (reader.path / "tokenizer_config.json").is_file():  # a Hugging Face model's own tokenizer files
        files += _copy_model_files(reader.path, out)
    elif tokenizer is not None:
        files += _write_tokenizer(tokenizer, out, cfg.seq_length)
    return {"checkpoint": str(reader.path), "out": str(out), "files": files, "vocab_size": vocab,
            "padded_vocab_size": padded, "dropped_padding_rows": padded - vocab, "parameters": parameters,
            "tokenizer": tokenizer is not None}
