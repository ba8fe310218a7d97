"""The model's keys (`model.*`): GPT as MT-NLG trained it by default, Llama-style blocks by key
(docs/llama.md); and the shape rules a model must meet, as Problems naming the key
(config/__init__.py raises them as ConfigError).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trident.config.pipeline_schedules import Problem


@dataclass
class ModelConfig:
    num_layers: int = 2
    hidden_size: int = 64
    num_heads: int = 4
    seq_length: int = 64
    vocab_size: int = 0  # 0: take it from the tokenizer
    make_vocab_size_divisible_by: int = 128
    ffn_hidden_size: int = 0  # 0: 4 * hidden_size (gelu), Llama's 2/3 of that up to a multiple of 256 (swiglu)
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    layernorm_epsilon: float = 1e-5
    init_std: float = 0.0  # 0: sqrt(1 / (3 * hidden_size)), as MT-NLG
    activation: str = "gelu"  # gelu (exact, erf) | gelu_tanh (the tanh approximation original GPT-2 used)
    # Llama-style blocks, each a key (defaults: GPT as MT-NLG trained it)
    position: str = "learned"  # learned (a position table) | rope (rotary, Su et al. 2021)
    rope_theta: float = 10000.0  # the rotary base
    norm: str = "layernorm"  # layernorm | rmsnorm
    mlp: str = "gelu"  # gelu (fc2(gelu(fc1 x)), model.activation) | swiglu (fc2(silu(gate x) * fc1 x))
    num_kv_heads: int = 0  # key/value heads (grouped-query attention; 1: multi-query); 0: num_heads
    tie_embeddings: bool = True  # the output head reuses the input embedding
    bias: bool = True  # biases in the linear layers and LayerNorms

    @property
    def ffn_size(self) -> int:
        if self.ffn_hidden_size:
            return self.ffn_hidden_size
        if self.mlp == "swiglu":  # Llama's 2/3 of 4h (same parameters as a 4h GeLU MLP), up to a multiple of 256
            return 256 * math.ceil(8 * self.hidden_size / 3 / 256)
        return 4 * self.hidden_size

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def std(self) -> float:
        return self.init_std or math.sqrt(1.0 / (3.0 * self.hidden_size))

    def padded_vocab_size(self, tp: int = 1) -> int:
        """Vocabulary padded to a multiple of lcm(make_vocab_size_divisible_by, tp) (50257 -> 51200 at 1024).

        Unlike Megatron (multiple * tp) this is the same for every TP degree that divides the multiple,
        so checkpoints reshard between TP degrees without changing the embedding's shape."""
        multiple = math.lcm(self.make_vocab_size_divisible_by, tp)
        return int(math.ceil(self.vocab_size / multiple) * multiple)


MODEL_CHOICES = {
    "model.activation": ("gelu", "gelu_tanh"),
    "model.position": ("learned", "rope"),
    "model.norm": ("layernorm", "rmsnorm"),
    "model.mlp": ("gelu", "swiglu"),
}


def model_problems(m: ModelConfig, tp: int) -> list[Problem]:
    """Grouped-query heads and rotary positions: shapes the model can be built (and sharded) with."""
    problems = []
    if m.num_heads % m.kv_heads:
        problems.append(Problem("model.num_kv_heads", f"{m.num_kv_heads} must divide model.num_heads={m.num_heads} "
                                "(query heads share key/value heads in groups)"))
    # key/value heads are sharded when tp divides them, each replicated on tp/kv ranks when kv divides tp
    elif m.kv_heads % tp and tp % m.kv_heads:
        problems.append(Problem("model.num_kv_heads", f"{m.kv_heads} key/value heads cannot be spread over "
                                f"tp={tp} ranks: one must divide the other"))
    if m.position == "rope" and m.head_dim % 2:
        problems.append(Problem("model.position", f"rope needs an even head size, got hidden_size/num_heads = "
                                f"{m.head_dim}"))
    return problems
