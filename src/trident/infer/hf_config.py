"""A Hugging Face config.json <-> trident's model keys, for the families trident computes exactly:
GPT-2 (gpt2), Llama 1/2/3 (llama, rope_scaling linear and llama3), Mistral (mistral) and Qwen2/2.5
(qwen2). docs/open-models.md has the table of which HF field maps to which `model.*` key.

Import reads every architecture field and refuses (ValueError naming the key) any value trident
would not compute exactly; export writes the family's config back from trident's keys. The config an
import read is kept in the checkpoint (hf_config.json), so the export also gives back the fields
that are not architecture (token ids, initializer range, the original's extra keys) as they were.
"""
from __future__ import annotations

import math
from pathlib import Path

LLAMA_BLOCKS = ("rope", "rmsnorm", "swiglu")  # (model.position, model.norm, model.mlp)
LLAMA_FAMILIES = ("llama", "mistral", "qwen2")
FAMILIES = ("gpt2", *LLAMA_FAMILIES)
# HF activation_function -> model.activation (GPT-2); each computes the same function bit for bit
GPT2_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_tanh"}
ROPE_SCALINGS = ("default", "linear", "llama3")
HF_CONFIG = "hf_config.json"  # the imported model's own config.json, kept inside its checkpoints


def _refuser(config: dict, source: Path):
    def refuse(key, why):
        raise ValueError(f"{source}: config key '{key}' = {config.get(key)!r}: {why}")
    return refuse


def model_type(hf: dict, source: Path) -> str:
    kind = hf.get("model_type", "gpt2")
    if kind not in FAMILIES:
        _refuser(hf, source)("model_type", f"trident imports {', '.join(FAMILIES)} models")
    return kind


def _positive(hf: dict, keys: tuple, refuse) -> None:
    for key in keys:
        if not isinstance(hf.get(key), int) or hf[key] <= 0:
            refuse(key, "must be a positive integer")


# ---- import ---------------------------------------------------------------------------------------
def gpt2_model(hf: dict, source: Path, m) -> None:
    """Fill ModelConfig `m` from a GPT-2 config.json (refusing what trident would compute differently)."""
    refuse = _refuser(hf, source)
    _positive(hf, ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size"), refuse)
    act = hf.get("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        refuse("activation_function", f"trident's MLP is GeLU: one of {', '.join(GPT2_ACTIVATIONS)}")
    for key, wrong, why in (("scale_attn_weights", False, "trident always scales attention by 1/sqrt(head_dim)"),
                            ("scale_attn_by_inverse_layer_idx", True, "trident does not scale attention by layer"),
                            ("add_cross_attention", True, "trident's GPT is decoder-only, without cross-attention"),
                            ("tie_word_embeddings", False, "GPT-2's output head is its input embedding")):
        if bool(hf.get(key, not wrong)) == wrong:
            refuse(key, why)
    m.num_layers, m.hidden_size, m.num_heads = hf["n_layer"], hf["n_embd"], hf["n_head"]
    m.seq_length = m.max_positions = hf["n_positions"]
    m.vocab_size, m.ffn_hidden_size = hf["vocab_size"], hf.get("n_inner") or 0
    m.layernorm_epsilon = float(hf.get("layer_norm_epsilon", 1e-5))
    m.hidden_dropout = float(hf.get("resid_pdrop", 0.0))
    m.attention_dropout = float(hf.get("attn_pdrop", 0.0))
    m.activation, m.hf_model_type = GPT2_ACTIVATIONS[act], "gpt2"


def _rope_parameters(hf: dict) -> dict:
    """The rotary settings in either spelling: transformers 5's rope_parameters, 4's rope_theta + rope_scaling."""
    rope = dict(hf.get("rope_scaling") or {}) | dict(hf.get("rope_parameters") or {})
    rope.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    rope["rope_type"] = rope.get("rope_type", rope.get("type", "default"))
    return rope


def _rope_model(hf: dict, refuse, m) -> None:
    rope = _rope_parameters(hf)
    kind = rope["rope_type"]
    if kind not in ROPE_SCALINGS:
        refuse("rope_parameters", f"rope_type {kind!r}: trident implements {', '.join(ROPE_SCALINGS)}")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        refuse("rope_parameters", "partial rotary embeddings are not implemented")
    needed = {"default": (), "linear": ("factor",),
              "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[kind]
    missing = [key for key in needed if not isinstance(rope.get(key), (int, float))]
    if missing:
        refuse("rope_parameters", f"rope_type {kind} needs {', '.join(missing)}")
    m.rope_theta = float(rope["rope_theta"])
    m.rope_scaling = "none" if kind == "default" else kind
    if kind != "default":
        m.rope_scaling_factor = float(rope["factor"])
    if kind == "llama3":
        m.rope_low_freq_factor = float(rope["low_freq_factor"])
        m.rope_high_freq_factor = float(rope["high_freq_factor"])
        m.rope_original_max_positions = int(rope["original_max_position_embeddings"])


def _window(hf: dict, kind: str) -> int:
    if kind == "mistral":
        return hf.get("sliding_window") or 0
    return (hf.get("sliding_window") or 0) if hf.get("use_sliding_window") else 0


def _check_biases(hf: dict, kind: str, refuse) -> tuple[bool, bool]:
    """(model.bias, model.qkv_bias) of a Llama-family config."""
    if kind == "qwen2":
        return False, True  # Qwen2: biases on q, k and v; none on o_proj or the MLP
    if kind == "mistral":
        return False, False
    if bool(hf.get("attention_bias", False)) != bool(hf.get("mlp_bias", False)):
        refuse("mlp_bias", "trident has one switch (model.bias) for attention and MLP biases; they must agree")
    return bool(hf.get("attention_bias", False)), False


def llama_model(hf: dict, source: Path, m) -> None:
    """Fill ModelConfig `m` from a Llama, Mistral or Qwen2 config.json."""
    refuse, kind = _refuser(hf, source), hf["model_type"]
    _positive(hf, ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                   "max_position_embeddings"), refuse)
    if hf.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "trident's SwiGLU gates with silu")
    if hf.get("head_dim") not in (None, hf["hidden_size"] // hf["num_attention_heads"]):
        refuse("head_dim", "trident's head size is hidden_size / num_attention_heads")
    if hf.get("pretraining_tp", 1) not in (None, 1):
        refuse("pretraining_tp", "only 1 (exact linear layers) is supported")
    _rope_model(hf, refuse, m)
    m.bias, m.qkv_bias = _check_biases(hf, kind, refuse)
    m.num_layers, m.hidden_size, m.num_heads = hf["num_hidden_layers"], hf["hidden_size"], hf["num_attention_heads"]
    m.num_kv_heads = hf.get("num_key_value_heads") or m.num_heads
    m.max_positions, m.vocab_size = hf["max_position_embeddings"], hf["vocab_size"]
    m.sliding_window = _window(hf, kind)
    # a window shorter than the positions: train (and generate) within it, which is exact (docs/open-models.md)
    m.seq_length = min(m.max_positions, m.sliding_window or m.max_positions)
    m.ffn_hidden_size = hf["intermediate_size"]
    m.position, m.norm, m.mlp = LLAMA_BLOCKS
    m.layernorm_epsilon = float(hf.get("rms_norm_eps", 1e-6))
    m.tie_embeddings = bool(hf.get("tie_word_embeddings", False))
    m.attention_dropout = float(hf.get("attention_dropout", 0.0))
    m.hf_model_type = kind


def trident_config(hf: dict, source: Path, pad_vocab_multiple: int | None, seed: int):
    """The trident Config (validated for one process) whose model is the config.json's."""
    from trident.config import Config

    config = Config()
    m = config.model
    (gpt2_model if model_type(hf, source) == "gpt2" else llama_model)(hf, source, m)
    hints = (hf.get("trident") or {}).get("model", {})  # what a trident export wrote down
    m.make_vocab_size_divisible_by = pad_vocab_multiple or hints.get("make_vocab_size_divisible_by", 128)
    m.init_std = float(hints.get("init_std", hf.get("initializer_range", 0.0)))
    m.hidden_dropout = float(hints.get("hidden_dropout", m.hidden_dropout))
    config.train.seed = seed
    return config.validate(1)


# ---- export ---------------------------------------------------------------------------------------
def family_of(cfg) -> str:
    """Which transformers architecture computes this model (else a ValueError naming the keys)."""
    llama = (cfg.position, cfg.norm, cfg.mlp) == LLAMA_BLOCKS
    if cfg.hf_model_type:
        fits = cfg.hf_model_type == "gpt2" and _is_gpt2(cfg) or cfg.hf_model_type in LLAMA_FAMILIES and llama
        if not fits:
            raise ValueError(f"model.hf_model_type={cfg.hf_model_type} does not describe this model's blocks "
                             f"(position={cfg.position}, norm={cfg.norm}, mlp={cfg.mlp})")
        return cfg.hf_model_type
    if llama:
        return "qwen2" if cfg.qkv_bias and not cfg.bias else "llama"
    if _is_gpt2(cfg):
        return "gpt2"
    raise ValueError("no Hugging Face architecture computes this model: GPT-2 needs model.position=learned, "
                     "norm=layernorm, mlp=gelu, bias=true, tie_embeddings=true, num_kv_heads=num_heads; Llama needs "
                     f"position=rope, norm=rmsnorm, mlp=swiglu (this model: position={cfg.position}, "
                     f"norm={cfg.norm}, mlp={cfg.mlp}, bias={cfg.bias}, tie_embeddings={cfg.tie_embeddings}, "
                     f"num_kv_heads={cfg.kv_heads})")


def _is_gpt2(cfg) -> bool:
    return (cfg.position, cfg.norm, cfg.mlp, cfg.bias, cfg.tie_embeddings, cfg.kv_heads) == (
        "learned", "layernorm", "gelu", True, True, cfg.num_heads)


def _gpt2_fields(cfg) -> dict:
    names = {v: k for k, v in GPT2_ACTIVATIONS.items()}
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_positions": cfg.positions,
            "n_ctx": cfg.positions, "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers, "n_head": cfg.num_heads,
            "n_inner": cfg.ffn_hidden_size or None, "activation_function": names[cfg.activation],
            "resid_pdrop": cfg.hidden_dropout, "embd_pdrop": cfg.hidden_dropout, "attn_pdrop": cfg.attention_dropout,
            "layer_norm_epsilon": cfg.layernorm_epsilon, "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "tie_word_embeddings": True}


def _rope_fields(cfg) -> dict:
    rope = {"rope_type": "default" if cfg.rope_scaling == "none" else cfg.rope_scaling, "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling != "none":
        rope["factor"] = cfg.rope_scaling_factor
    if cfg.rope_scaling == "llama3":
        rope |= {"low_freq_factor": cfg.rope_low_freq_factor, "high_freq_factor": cfg.rope_high_freq_factor,
                 "original_max_position_embeddings": cfg.rope_original_max_positions}
    scaling = None if cfg.rope_scaling == "none" else {k: v for k, v in rope.items() if k != "rope_theta"}
    # both spellings: transformers 4.x reads rope_theta + rope_scaling, 5.x rope_parameters
    return {"rope_theta": cfg.rope_theta, "rope_scaling": scaling, "rope_parameters": rope}


def _llama_fields(cfg, kind: str) -> dict:
    architecture = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[kind]
    fields = {"architectures": [architecture], "model_type": kind, "hidden_size": cfg.hidden_size,
              "intermediate_size": cfg.ffn_size, "num_hidden_layers": cfg.num_layers,
              "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.kv_heads,
              "hidden_act": "silu", "max_position_embeddings": cfg.positions, "rms_norm_eps": cfg.layernorm_epsilon,
              "attention_dropout": cfg.attention_dropout, "tie_word_embeddings": cfg.tie_embeddings,
              **_rope_fields(cfg)}
    if kind in ("llama", "mistral"):  # Qwen2's config has no head_dim field
        fields["head_dim"] = cfg.head_dim
    if kind == "llama":
        fields |= {"attention_bias": cfg.bias, "mlp_bias": cfg.bias, "pretraining_tp": 1}
    if kind == "mistral":
        fields["sliding_window"] = cfg.sliding_window or None
    if kind == "qwen2":
        fields |= {"use_sliding_window": bool(cfg.sliding_window), "sliding_window": cfg.sliding_window or None}
    return fields


def hf_config(cfg, vocab_size: int, eod_id: int | None, original: dict | None = None) -> dict:
    """config.json describing trident's model exactly: the architecture from trident's keys; the rest
    from the imported model's own config.json when there is one (token ids, extra keys), else trident's."""
    kind = family_of(cfg)
    fields = _gpt2_fields(cfg) if kind == "gpt2" else _llama_fields(cfg, kind)
    fields |= {"vocab_size": vocab_size, "use_cache": True, "torch_dtype": "float32", "dtype": "float32",
               # lets import-hf rebuild the same trident config (vocab padding, init) on the way back
               "trident": {"model": {"make_vocab_size_divisible_by": cfg.make_vocab_size_divisible_by,
                                     "init_std": cfg.init_std, "hidden_dropout": cfg.hidden_dropout}}}
    if original is not None and original.get("model_type") == kind:
        kept = {k: v for k, v in original.items() if k not in fields and k not in ("transformers_version", "_name_or_path")}
        return kept | fields
    std = cfg.init_std or math.sqrt(1.0 / (3.0 * cfg.hidden_size))
    return fields | {"initializer_range": std, "bos_token_id": eod_id, "eos_token_id": eod_id}
