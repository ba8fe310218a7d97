"""Hugging Face interop for Llama-style models: a trident checkpoint <-> a `LlamaForCausalLM` folder
(and MistralForCausalLM, Qwen2ForCausalLM: the same tensors; their configs are infer/hf_config.py's).

trident's GPT configured with model.position=rope, norm=rmsnorm, mlp=swiglu computes transformers'
Llama exactly (rotary in the "rotate half" convention, RMSNorm in fp32, SwiGLU, grouped-query
attention), so the conversion is renaming and splitting fused tensors; nothing is transposed
(both store linear weights [out, in]):
  * multi-head attention's fused QKV rows (head, q|k|v, d) <-> q_proj, k_proj, v_proj;
  * grouped-query attention's `kv` rows (kv head, k|v, d) <-> k_proj, v_proj (`q` is q_proj as is);
  * mlp.gate, mlp.fc1, mlp.fc2 <-> gate_proj, up_proj, down_proj;
  * the padded vocabulary rows of the embedding (and of the untied head) are dropped / re-added.
model.bias=true maps to attention_bias and mlp_bias (RMSNorm has no bias either way); model.qkv_bias
to the q/k/v projections' biases alone (Qwen2).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch


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
    for kind in ("weight", "bias") if cfg.bias or cfg.qkv_bias else ("weight",):
        out += _attention_tensors(cfg, t, g, kind)
    for kind in kinds:
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
