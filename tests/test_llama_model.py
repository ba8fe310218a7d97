"""Llama-style blocks as config keys of the one GPT: presets and their parameter counts, validation
naming the key, rotary positions (relative: a shifted sequence gives the same logits), grouped- and
multi-query KV-cached decoding against full recomputation, activation checkpointing, and the
switches (biases, tied head) changing exactly the parameters they should."""
import subprocess
import sys

import pytest
import torch

from trident.config import ConfigError, ModelConfig, load_config
from trident.model.gpt import build_model, count_parameters

TINY = load_config("llama-tiny", ["model.vocab_size=96"]).model


def _model(*overrides, seed=5):
    cfg = load_config("llama-tiny", ["model.vocab_size=96", *overrides]).validate(1).model
    return build_model(cfg, cfg.padded_vocab_size(), seed=seed)


def test_defaults_are_gpt_and_the_7b_preset_has_llama_2_7b_parameters():
    gpt = ModelConfig()
    assert (gpt.position, gpt.norm, gpt.mlp, gpt.kv_heads, gpt.tie_embeddings, gpt.bias) == (
        "learned", "layernorm", "gelu", gpt.num_heads, True, True)
    cfg = load_config("llama-7b").validate().model
    with torch.device("meta"):
        model = build_model(cfg, cfg.padded_vocab_size(), seed=0)
    assert count_parameters(model) == 6_738_415_616  # Llama 2 7B, as transformers counts it
    names = {n for n, _ in model.named_parameters()}
    assert "output.weight" in names and "embedding.position.weight" not in names
    assert not any(n.endswith("bias") for n in names)
    assert ModelConfig(hidden_size=4096, mlp="swiglu").ffn_size == 11008  # Llama's 2/3 of 4h, to a multiple of 256


@pytest.mark.parametrize("overrides,key", [
    (["model.num_kv_heads=3"], "model.num_kv_heads"),  # does not divide 4 query heads
    (["model.num_heads=12", "model.hidden_size=48", "model.num_kv_heads=6", "parallel.tp=4"], "model.num_kv_heads"),
    (["model.num_heads=32", "model.hidden_size=96", "model.num_kv_heads=4"], "model.position"),  # odd head size
    (["model.norm=batchnorm"], "model.norm"),
    (["model.mlp=relu"], "model.mlp"),
    (["model.position=alibi"], "model.position"),
    (["model.rope_theta=0"], "model.rope_theta"),
])
def test_bad_llama_keys_are_refused_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("llama-tiny", overrides).validate(4 if "parallel.tp=4" in overrides else 1)


def test_a_config_mistake_exits_2_naming_the_key():
    done = subprocess.run([sys.executable, "-m", "trident", "plan", "llama-tiny", "model.num_kv_heads=3",
                           "model.vocab_size=96", "--gpus", "1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "model.num_kv_heads" in done.stderr, done.stderr[-1000:]


@torch.no_grad()
def test_rotary_positions_are_relative_and_learned_ones_absolute():
    tokens = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(0))
    model = _model().eval()
    base = model(tokens)
    torch.testing.assert_close(model(tokens, position_offset=9), base, rtol=0, atol=2e-5)
    rows = torch.tensor([[3], [20]]) + torch.arange(12)  # a different offset per row, as an explicit tensor
    torch.testing.assert_close(model(tokens, positions=rows), base, rtol=0, atol=2e-5)
    learned = _model("model.position=learned").eval()
    assert not torch.allclose(learned(tokens, position_offset=9), learned(tokens), atol=1e-3)
    with pytest.raises(ValueError, match="exceeds the model.s 32 positions"):
        learned(tokens, position_offset=30)


@torch.no_grad()
@pytest.mark.parametrize("kv_heads", [2, 1])  # grouped-query, multi-query
def test_kv_cached_decoding_equals_full_recomputation(kv_heads):
    model = _model(f"model.num_kv_heads={kv_heads}").eval()
    tokens = torch.randint(0, 96, (2, 20), generator=torch.Generator().manual_seed(1))
    full = model(tokens)
    cache = model.new_cache()
    steps = [model(tokens[:, :8], cache=cache)]
    for i in range(8, 20):
        steps.append(model(tokens[:, i:i + 1], cache=cache, position_offset=i))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=2e-5)
    # the cache holds only the key/value heads: num_heads / num_kv_heads times smaller than multi-head
    assert cache[0]["k"].shape == (2, kv_heads, 20, TINY.head_dim) and cache[0]["v"].shape == cache[0]["k"].shape


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_gives_the_same_gradients(mode):
    tokens = torch.randint(0, 96, (2, 32), generator=torch.Generator().manual_seed(2))
    grads = {}
    for checkpointing in ("none", mode):
        cfg = TINY
        model = build_model(cfg, cfg.padded_vocab_size(), seed=5, activation_checkpointing=checkpointing).train()
        model(tokens, tokens).mean().backward()
        grads[checkpointing] = {n: p.grad for n, p in model.named_parameters()}
    for name, grad in grads["none"].items():
        torch.testing.assert_close(grads[mode][name], grad, rtol=0, atol=1e-7, msg=name)


def test_each_switch_changes_exactly_its_parameters():
    names = {n for n, _ in _model().named_parameters()}
    block = {n.removeprefix("blocks.0.") for n in names if n.startswith("blocks.0.")}
    assert block == {"ln1.weight", "ln2.weight", "attention.q.weight", "attention.kv.weight",
                     "attention.proj.weight", "mlp.gate.weight", "mlp.fc1.weight", "mlp.fc2.weight"}
    assert {n for n in names if not n.startswith("blocks.")} == {"embedding.word.weight", "final_norm.weight",
                                                                 "output.weight"}
    mha = {n for n, _ in _model("model.num_kv_heads=0", "model.bias=true", "model.tie_embeddings=true",
                                "model.norm=layernorm").named_parameters()}
    assert "blocks.1.attention.qkv.weight" in mha and "blocks.1.attention.qkv.bias" in mha
    assert "blocks.1.mlp.gate.bias" in mha and "blocks.1.ln1.bias" in mha and "output.weight" not in mha
    # model.bias=false on GPT blocks: LayerNorm without its bias too
    gpt = build_model(ModelConfig(vocab_size=96, bias=False), 128, seed=0)
    assert not any(n.endswith("bias") for n, _ in gpt.named_parameters())
    assert count_parameters(gpt) == 128 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 2 * 64) + 64
