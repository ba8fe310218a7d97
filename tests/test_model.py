"""The GPT: shapes, MT-NLG initialisation statistics, and logits equal to a straightforward
re-implementation (batch-first, explicit causal softmax attention) on the same weights."""
import math

import pytest
import torch
import torch.nn.functional as F

from trident.config import ModelConfig
from trident.model.gpt import build_model, count_parameters

CFG = ModelConfig(num_layers=3, hidden_size=48, num_heads=4, seq_length=24, vocab_size=100,
                  make_vocab_size_divisible_by=16)


def reference_logits(model, tokens):
    """GPT-2 forward written out by hand from the model's parameters."""
    p = dict(model.named_parameters())
    h, heads = CFG.hidden_size, CFG.num_heads
    d = h // heads
    b, s = tokens.shape
    x = p["embedding.word.weight"][tokens] + p["embedding.position.weight"][:s]
    mask = torch.full((s, s), float("-inf")).triu(1)
    for i in range(CFG.num_layers):
        q = f"blocks.{i}."
        y = F.layer_norm(x, (h,), p[q + "ln1.weight"], p[q + "ln1.bias"], CFG.layernorm_epsilon)
        qkv = y @ p[q + "attention.qkv.weight"].T + p[q + "attention.qkv.bias"]
        qkv = qkv.view(b, s, heads, 3, d)  # rows are ordered (head, q|k|v, head_dim)
        qh, kh, vh = (qkv[:, :, :, j].transpose(1, 2) for j in range(3))
        att = torch.softmax(qh @ kh.transpose(-1, -2) / math.sqrt(d) + mask, dim=-1)
        y = (att @ vh).transpose(1, 2).reshape(b, s, h)
        x = x + y @ p[q + "attention.proj.weight"].T + p[q + "attention.proj.bias"]
        y = F.layer_norm(x, (h,), p[q + "ln2.weight"], p[q + "ln2.bias"], CFG.layernorm_epsilon)
        y = F.gelu(y @ p[q + "mlp.fc1.weight"].T + p[q + "mlp.fc1.bias"])
        x = x + y @ p[q + "mlp.fc2.weight"].T + p[q + "mlp.fc2.bias"]
    x = F.layer_norm(x, (h,), p["final_norm.weight"], p["final_norm.bias"], CFG.layernorm_epsilon)
    return x @ p["embedding.word.weight"].T


def test_logits_equal_a_straightforward_reimplementation():
    model = build_model(CFG, CFG.padded_vocab_size(), seed=3).eval()
    with torch.no_grad():  # non-trivial norms and biases so every term is exercised
        for name, param in model.named_parameters():
            if param.ndim == 1:
                param.add_(0.1 * torch.randn_like(param))
    tokens = torch.randint(0, 100, (2, 24))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), reference_logits(model, tokens), atol=1e-5, rtol=1e-5)


def test_shapes_loss_and_vocabulary_padding():
    assert CFG.padded_vocab_size() == 112 and ModelConfig(vocab_size=50257).padded_vocab_size(8) == 50304
    model = build_model(CFG, CFG.padded_vocab_size(), seed=0)
    tokens = torch.randint(0, 100, (3, 10))
    assert model(tokens).shape == (3, 10, 112)
    loss = model(tokens, labels=tokens)
    assert loss.shape == (3, 10) and torch.all(loss > 0)
    h, L, V = 48, 3, 112
    expected = V * h + 24 * h + L * (12 * h * h + 13 * h) + 2 * h  # embeddings, blocks, final norm
    assert count_parameters(model) == expected


def test_initialisation_follows_mt_nlg():
    cfg = ModelConfig(num_layers=8, hidden_size=256, num_heads=8, seq_length=64, vocab_size=4096)
    model = build_model(cfg, cfg.padded_vocab_size(), seed=0)
    sigma = math.sqrt(1 / (3 * 256))
    params = dict(model.named_parameters())
    assert params["embedding.word.weight"].std().item() == pytest.approx(sigma, rel=0.02)
    assert params["blocks.0.mlp.fc1.weight"].std().item() == pytest.approx(sigma, rel=0.03)
    scaled = sigma / math.sqrt(2 * 8)  # output projections of each block
    assert params["blocks.5.attention.proj.weight"].std().item() == pytest.approx(scaled, rel=0.03)
    assert params["blocks.5.mlp.fc2.weight"].std().item() == pytest.approx(scaled, rel=0.03)
    assert torch.all(params["blocks.2.ln1.weight"] == 1) and torch.all(params["blocks.2.attention.qkv.bias"] == 0)
    assert abs(params["blocks.0.mlp.fc1.weight"].mean().item()) < 1e-3


def test_kv_cache_matches_full_forward():
    model = build_model(CFG, CFG.padded_vocab_size(), seed=1).eval()
    tokens = torch.randint(0, 100, (1, 12))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :8], cache=cache)[:, -1]]
        for t in range(8, 12):
            steps.append(model(tokens[:, t:t + 1], cache=cache, position_offset=t)[:, -1])
    torch.testing.assert_close(torch.stack(steps[1:], 1), full[:, 8:], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="exceeds the model.s 24 positions"):
        model(torch.zeros(1, 25, dtype=torch.long))
