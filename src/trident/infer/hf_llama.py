"""Hugging Face interop for Llama-style models: a trident checkpoint <-> a `LlamaForCausalLM` folder.

trident's GPT configured with model.position=rope, norm=rmsnorm, mlp=swiglu computes transformers'
Llama exactly (rotary in the "rotate half" convention, RMSNorm in fp32, SwiGLU, grouped-query
attention), so the conversion is renaming and splitting fused tensors; nothing is transposed
(both store linear weights [out, in]):
  * multi-head attention's fused QKV rows (head, q|k|v, d) <-> q_proj, k_proj, v_proj;
  * grouped-query attention's `kv` rows (kv head, k|v, d) <-> k_proj, v_proj (`q` is q_proj as is);
  * mlp.gate, mlp.fc1, mlp.fc2 <-> gate_proj, up_proj, down_proj;
  * the padded vocabulary rows of the embedding (and of the untied head) are dropped / re-added.
model.bias=true maps to attention_bias and mlp_bias (RMSNorm has no bias either way).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

LLAMA_BLOCKS = ("rope", "rmsnorm", "swiglu")  # (model.position, model.norm, model.mlp)


def is_llama(cfg) -> bool:
    return (cfg.position, cfg.norm, cfg.mlp) == LLAMA_BLOCKS


def llama_config(cfg, vocab_size: int, eod_id: int | None) -> dict:
    """config.json for transformers.LlamaConfig describing trident's model exactly."""
    theta = cfg.rope_theta
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_size,
            "hidden_size": cfg.hidden_size, "intermediate_size": cfg.ffn_size, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
            "hidden_act": "silu", "max_position_embeddings": cfg.seq_length, "rms_norm_eps": cfg.layernorm_epsilon,
            # both spellings: transformers 4.x reads rope_theta, 5.x rope_parameters
            "rope_theta": theta, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
            "attention_bias": cfg.bias, "mlp_bias": cfg.bias, "attention_dropout": cfg.attention_dropout,
            "tie_word_embeddings": cfg.tie_embeddings, "initializer_range": cfg.std, "use_cache": True,
            "bos_token_id": eod_id, "eos_token_id": eod_id, "torch_dtype": "float32", "dtype": "float32",
            "trident": {"model": {"make_vocab_size_divisible_by": cfg.make_vocab_size_divisible_by,
                                  "init_std": cfg.init_std, "hidden_dropout": cfg.hidden_dropout}}}


# ---- the tensor mapping: (HF name, trident name, trident full tensor -> HF tensor) ----------------
def _rows(parts: int, index: int, head_dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Part `index` of rows ordered (head, part, d): e.g. k of a fused (head, q|k|v, d) weight or bias."""
    def take(t: torch.Tensor) -> torch.Tensor:
        heads = t.shape[0] // (parts * head_dim)
        return t.reshape(heads, parts, head_dim, *t.shape[1:])[:, index].reshape(heads * head_dim, *t.shape[1:])
    return take


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _attention_tensors(cfg, t: str, g: str, kind: str) -> list[tuple[str, str, Callable]]:
    d = cfg.head_dim
    if cfg.kv_heads == cfg.num_heads:  # fused QKV
        return [(f"{g}self_attn.{p}_proj.{kind}", f"{t}attention.qkv.{kind}", _rows(3, i, d))
                for i, p in enumerate("qkv")]
    return [(f"{g}self_attn.q_proj.{kind}", f"{t}attention.q.{kind}", _same),
            (f"{g}self_attn.k_proj.{kind}", f"{t}attention.kv.{kind}", _rows(2, 0, d)),
            (f"{g}self_attn.v_proj.{kind}", f"{t}attention.kv.{kind}", _rows(2, 1, d))]


def _block_tensors(cfg, i: int) -> list[tuple[str, str, Callable]]:
    t, g = f"blocks.{i}.", f"model.layers.{i}."
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    out = [(g + "input_layernorm.weight", t + "ln1.weight", _same),
           (g + "post_attention_layernorm.weight", t + "ln2.weight", _same)]
    for kind in kinds:
        out += _attention_tensors(cfg, t, g, kind)
        out += [(f"{g}self_attn.o_proj.{kind}", f"{t}attention.proj.{kind}", _same),
                (f"{g}mlp.gate_proj.{kind}", f"{t}mlp.gate.{kind}", _same),
                (f"{g}mlp.up_proj.{kind}", f"{t}mlp.fc1.{kind}", _same),
                (f"{g}mlp.down_proj.{kind}", f"{t}mlp.fc2.{kind}", _same)]
    return out


def llama_tensors(cfg, vocab_size: int) -> list[tuple[str, str, Callable]]:
    """Every tensor of the LlamaForCausalLM checkpoint: (HF name, trident name, conversion)."""
    def vocab(t: torch.Tensor) -> torch.Tensor:
        return t[:vocab_size]  # padded rows are not tokens

    out = [("model.embed_tokens.weight", "embedding.word.weight", vocab)]
    for i in range(cfg.num_layers):
        out += _block_tensors(cfg, i)
    out.append(("model.norm.weight", "final_norm.weight", _same))
    if not cfg.tie_embeddings:
        out.append(("lm_head.weight", "output.weight", vocab))
    return out


def llama_from_hf(cfg, tensors: dict[str, torch.Tensor], padded_vocab: int, source: Path) -> dict[str, torch.Tensor]:
    """trident name -> full tensor, from the HF tensors (missing ones raise naming the tensor)."""
    def get(name: str) -> torch.Tensor:
        if name not in tensors:
            raise KeyError(f"{source}: weights have no tensor '{name}'")
        return tensors[name]

    grouped: dict[str, list[tuple[str, Callable]]] = {}
    for hf, trident, _ in llama_tensors(cfg, cfg.vocab_size):
        grouped.setdefault(trident, []).append((hf, _))
    out = {}
    for trident, parts in grouped.items():
        pieces = [get(hf) for hf, _ in parts]
        if len(pieces) == 1:
            out[trident] = pieces[0]
        else:  # re-interleave q|k|v (or k|v) per head: rows (head, part, d)
            split = [p.reshape(-1, cfg.head_dim, *p.shape[1:]) for p in pieces]
            out[trident] = torch.stack(split, dim=1).reshape(-1, *pieces[0].shape[1:])
    for name in ("embedding.word.weight", "output.weight"):
        if name in out:
            table = out[name]
            out[name] = torch.cat([table, table.new_zeros(padded_vocab - table.shape[0], table.shape[1])])
    return out


# ---- import: config.json -> trident config ---------------------------------------------------------
def check_llama_config(config: dict, source: Path) -> None:
    """Refuse Llama configs whose model trident's GPT would not compute exactly, naming the key."""
    def refuse(key, why):
        raise ValueError(f"{source}: config key '{key}' = {config.get(key)!r}: {why}")

    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                "max_position_embeddings"):
        if not isinstance(config.get(key), int) or config[key] <= 0:
            refuse(key, "must be a positive integer")
    if config.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "trident's SwiGLU gates with silu")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        refuse("rope_parameters", "only plain rotary positions (rope_type default, no scaling) are implemented")
    if config.get("head_dim") not in (None, config["hidden_size"] // config["num_attention_heads"]):
        refuse("head_dim", "trident's head size is hidden_size / num_attention_heads")
    if bool(config.get("attention_bias", False)) != bool(config.get("mlp_bias", False)):
        refuse("mlp_bias", "trident has one switch (model.bias) for attention and MLP biases; they must agree")
    if config.get("pretraining_tp", 1) not in (None, 1):
        refuse("pretraining_tp", "only 1 (exact linear layers) is supported")


def trident_config_from_llama(hf: dict, pad_vocab_multiple: int | None, seed: int):
    """The trident Config (validated for one process) whose model is the Llama config.json's."""
    from trident.config import Config

    hints = (hf.get("trident") or {}).get("model", {})
    rope = hf.get("rope_parameters") or {}
    config = Config()
    m = config.model
    m.num_layers, m.hidden_size, m.num_heads = hf["num_hidden_layers"], hf["hidden_size"], hf["num_attention_heads"]
    m.num_kv_heads = hf.get("num_key_value_heads") or m.num_heads
    m.seq_length, m.vocab_size = hf["max_position_embeddings"], hf["vocab_size"]
    m.ffn_hidden_size = hf["intermediate_size"]
    m.position, m.norm, m.mlp = LLAMA_BLOCKS
    m.rope_theta = float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))
    m.layernorm_epsilon = float(hf.get("rms_norm_eps", 1e-6))
    m.tie_embeddings = bool(hf.get("tie_word_embeddings", False))
    m.bias = bool(hf.get("attention_bias", False))
    m.attention_dropout = float(hf.get("attention_dropout", 0.0))
    m.hidden_dropout = float(hints.get("hidden_dropout", 0.0))
    m.make_vocab_size_divisible_by = pad_vocab_multiple or hints.get("make_vocab_size_divisible_by", 128)
    m.init_std = float(hints.get("init_std", hf.get("initializer_range", 0.0)))
    config.train.seed = seed
    return config.validate(1)
