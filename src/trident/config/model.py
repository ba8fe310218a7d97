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
    # gelu (exact, erf) | gelu_tanh (torch's tanh approximation, HF gelu_pytorch_tanh) | gelu_new (the same
    # approximation as original GPT-2 and HF's gelu_new write it, which rounds differently)
    activation: str = "gelu"
    # Llama-style blocks, each a key (defaults: GPT as MT-NLG trained it)
    position: str = "learned"  # learned (a position table) | rope (rotary, Su et al. 2021)
    rope_theta: float = 10000.0  # the rotary base
    rope_scaling: str = "none"  # none | linear | llama3 (Llama 3.1+ frequency scaling; docs/open-models.md)
    rope_scaling_factor: float = 1.0  # linear and llama3: the frequencies' divisor
    rope_low_freq_factor: float = 1.0  # llama3 only
    rope_high_freq_factor: float = 4.0  # llama3 only
    rope_original_max_positions: int = 8192  # llama3 only: the context the unscaled model was trained on
    max_positions: int = 0  # positions the model has (learned table / HF max_position_embeddings); 0: seq_length
    sliding_window: int = 0  # a Mistral/Qwen2 attention window; 0: none (trident refuses sequences longer than one)
    norm: str = "layernorm"  # layernorm | rmsnorm
    mlp: str = "gelu"  # gelu (fc2(gelu(fc1 x)), model.activation) | swiglu (fc2(silu(gate x) * fc1 x))
    num_kv_heads: int = 0  # key/value heads (grouped-query attention; 1: multi-query); 0: num_heads
    tie_embeddings: bool = True  # the output head reuses the input embedding
    bias: bool = True  # biases in the linear layers and LayerNorms
    qkv_bias: bool = False  # biases on the query/key/value projections even when model.bias=false (Qwen2)
    hf_model_type: str = ""  # the Hugging Face family export-hf writes (gpt2 | llama | mistral | qwen2); "": by blocks

    @property
    def ffn_size(self) -> int:
        if self.ffn_hidden_size:
            return self.ffn_hidden_size
        if self.mlp == "swiglu":  # Llama's 2/3 of 4h (same parameters as a 4h GeLU MLP), up to a multiple of 256
            return 256 * math.ceil(8 * self.hidden_size / 3 / 256)
        return 4 * self.hidden_size

    @property
    def positions(self) -> int:
        """Positions the model holds (its learned table's rows; max_position_embeddings on export)."""
        return self.max_positions or self.seq_length

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
    "model.activation": ("gelu", "gelu_tanh", "gelu_new"),
    "model.rope_scaling": ("none", "linear", "llama3"),
    "model.hf_model_type": ("", "gpt2", "llama", "mistral", "qwen2"),
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
    if m.seq_length > m.positions:
        problems.append(Problem("model.seq_length", f"{m.seq_length} is longer than the model's "
                                f"model.max_positions={m.max_positions} positions"))
    if m.sliding_window and m.seq_length > m.sliding_window:
        problems.append(Problem("model.sliding_window", f"sequences of model.seq_length={m.seq_length} tokens are "
                                f"longer than the attention window of {m.sliding_window}, which trident does not "
                                f"implement: set model.seq_length <= {m.sliding_window}"))
    if m.position == "rope" and m.head_dim % 2:
        problems.append(Problem("model.position", f"rope needs an even head size, got hidden_size/num_heads = "
                                f"{m.head_dim}"))
    return problems


# Keys a user may set differently from the checkpoint a run starts from (checkpoint/model_config.py):
# the training sequence (up to the model's positions) and dropout; every other key is the architecture.
TRAINING_CHOICE_KEYS = ("seq_length", "hidden_dropout", "attention_dropout")
