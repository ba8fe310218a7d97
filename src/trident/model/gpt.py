"""GPT as trained for MT-NLG: learned positions, pre-LayerNorm, GeLU MLP of 4h, tied embeddings;
and, by config keys of the same class, Llama-style blocks: rotary positions (model.position), RMSNorm
(model.norm), SwiGLU (model.mlp), grouped-query attention (model.num_kv_heads), an untied output head
(model.tie_embeddings) and no biases (model.bias). docs/llama.md.

Written once against trident.parallel.tensor layers; it knows nothing of ranks. Activations are
sequence-first [s, b, h]. A pipeline stage is the same class holding a slice of the layers
(`layers`), the embedding when `pre_process`, and the final norm + tied head when `post_process`.
Parameter names are global (blocks keyed by their global layer index) so checkpoints and the seeded
initialisation (model/init.py) are the same whatever the layout. Parameters are created directly with
the given dtype and device (torch.nn's `device=`, `dtype=`), so nothing is built twice.
"""
from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trident.config import ModelConfig
from trident.model.init import init_parameters
from trident.model.rope import Rotary, apply_rotary
from trident.parallel import tensor as T
from trident.parallel.attention import self_attention, sequence_positions
from trident.parallel.kv_heads import KeyValueLinear
from trident.parallel.norms import build_norm
from trident.parallel.sharding import mark

TIED_EMBEDDING = "embedding.word.weight"  # the input embedding, reused as the output head


class Attention(nn.Module):
    """Causal self-attention: multi-head (one fused QKV), or grouped-query / multi-query when
    model.num_kv_heads < num_heads (query projection `q`, key/value projection `kv`, whose heads
    parallel/kv_heads.py shards or replicates); rotary positions with model.position=rope."""

    def __init__(self, cfg: ModelConfig, tp: T.TPContext, device=None, dtype=None):
        super().__init__()
        factory = {"bias": cfg.bias, "tp": tp, "device": device, "dtype": dtype}
        projection = factory | {"bias": cfg.bias or cfg.qkv_bias}  # Qwen2: biases on q, k and v only
        self.head_dim, self.grouped = cfg.head_dim, cfg.kv_heads != cfg.num_heads
        if self.grouped:
            self.q = T.ColumnParallelLinear(cfg.hidden_size, cfg.hidden_size, **projection)
            self.kv = KeyValueLinear(cfg.hidden_size, cfg.kv_heads, cfg.head_dim, **projection)
        else:  # QKV rows are ordered (head, q|k|v, head_dim) so a contiguous row slice holds whole heads.
            self.qkv = T.ColumnParallelLinear(cfg.hidden_size, 3 * cfg.hidden_size, **projection)
        self.proj = T.RowParallelLinear(cfg.hidden_size, cfg.hidden_size, **factory)
        self.rotary = Rotary.of(cfg) if cfg.position == "rope" else None
        self.dropout = cfg.attention_dropout
        self.tp = tp

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of this rank's heads, each [b, heads, s, d] (keys and values
        with this rank's key/value heads: fewer than its query heads when grouped)."""
        if not self.grouped:
            qkv = self.qkv(x)
            s, b, _ = qkv.shape
            q, k, v = qkv.view(s, b, -1, 3, self.head_dim).permute(3, 1, 2, 0, 4)
            return q, k, v
        x = T.column_parallel_input(x, self.tp)  # one all-gather (SP) for both projections
        q, kv = self.q(x, gathered=True), self.kv(x, gathered=True)
        s, b, _ = q.shape
        k, v = kv.view(s, b, -1, 2, self.head_dim).permute(3, 1, 2, 0, 4)
        return q.view(s, b, -1, self.head_dim).permute(1, 2, 0, 3), k, v

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache=None,
             positions: torch.Tensor | None = None) -> torch.Tensor:
        """`cache`: None, a dict (one sequence, extended a token at a time), or a batched cache
        object whose `attend(q, k, v)` stores k, v at each row's own positions and attends over them
        (trident.infer.kv_cache.LayerCache: prompts of different lengths, rows joining mid-batch).
        Either caches keys after their rotation, with this rank's key/value heads only."""
        b, _, s, _ = q.shape
        if self.rotary is not None:
            q, k = apply_rotary(q, k, positions, self.rotary)
        if cache is not None and not isinstance(cache, dict):
            return cache.attend(q, k, v).permute(2, 0, 1, 3).reshape(s, b, -1)
        causal = True
        if cache is not None:
            if "k" in cache:
                if s != 1:
                    raise ValueError("a KV cache can only be extended one token at a time")
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                causal = False  # the single new query may attend to every cached position
            cache["k"], cache["v"] = k, v  # keys (rotated) and values of the key/value heads only
        dropout = self.dropout if self.training else 0.0
        out = self_attention(q, k, v, self.tp, causal=causal, dropout=dropout, enable_gqa=self.grouped)
        return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    def forward(self, x: torch.Tensor, cache: dict | None = None, selective: bool = False,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.project(x)
        if selective and cache is None and self.training:
            replay = partial(T.checkpoint_rng_contexts, self.tp)
            out = checkpoint(self.core, q, k, v, None, positions, use_reentrant=False, context_fn=replay)
        else:
            out = self.core(q, k, v, cache, positions)
        return self.proj(out)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GeLU's tanh approximation written out as original GPT-2 (and HF's gelu_new) computes it."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


GELUS = {"gelu": F.gelu, "gelu_tanh": partial(F.gelu, approximate="tanh"), "gelu_new": gelu_new}


class MLP(nn.Module):
    """fc2(gelu(fc1 x)) (model.mlp=gelu), or fc2(silu(gate x) * fc1 x) (swiglu, Shazeer 2020)."""

    def __init__(self, cfg: ModelConfig, tp: T.TPContext, device=None, dtype=None):
        super().__init__()
        factory = {"bias": cfg.bias, "tp": tp, "device": device, "dtype": dtype}
        self.swiglu = cfg.mlp == "swiglu"
        if self.swiglu:
            self.gate = T.ColumnParallelLinear(cfg.hidden_size, cfg.ffn_size, **factory)
        self.fc1 = T.ColumnParallelLinear(cfg.hidden_size, cfg.ffn_size, **factory)
        self.fc2 = T.RowParallelLinear(cfg.ffn_size, cfg.hidden_size, **factory)
        self.activation = GELUS[cfg.activation]
        self.tp = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            x = T.column_parallel_input(x, self.tp)  # one all-gather (SP) for both projections
            return self.fc2(F.silu(self.gate(x, gathered=True)) * self.fc1(x, gathered=True))
        return self.fc2(self.activation(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: T.TPContext, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.ln1 = build_norm(cfg.norm, cfg.hidden_size, cfg.layernorm_epsilon, cfg.bias, tp, **factory)
        self.attention = Attention(cfg, tp, **factory)
        self.ln2 = build_norm(cfg.norm, cfg.hidden_size, cfg.layernorm_epsilon, cfg.bias, tp, **factory)
        self.mlp = MLP(cfg, tp, **factory)
        self.dropout = cfg.hidden_dropout
        self.tp = tp

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.dropout == 0:
            return x
        # Replicated activations need the same mask on every TP rank; sequence-split ones a different one.
        with T.tp_split_rng(self.tp, x.device, active=self.tp.sequence_parallel):
            return F.dropout(x, self.dropout, training=True)

    def forward(self, x: torch.Tensor, cache: dict | None = None, selective: bool = False,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self._drop(self.attention(self.ln1(x), cache, selective, positions))
        return x + self._drop(self.mlp(self.ln2(x)))


class Embedding(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, tp: T.TPContext, positions: bool, device=None, dtype=None):
        super().__init__()
        self.word = T.VocabParallelEmbedding(vocab_size, cfg.hidden_size, tp, device=device, dtype=dtype)
        self.position = None
        if positions:  # an empty table: init_parameters gives the values (nn.Embedding would draw its own)
            table = torch.empty(cfg.positions, cfg.hidden_size, device=device, dtype=dtype)
            self.position = nn.Embedding(cfg.positions, cfg.hidden_size, _weight=table)
            mark(self.position.weight, None, tp)
        self.dropout = cfg.hidden_dropout
        self.tp = tp

    def forward(self, tokens: torch.Tensor, position_offset: int = 0,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """`positions` [b, s]: each token's absolute position (rows of a batch may be at different
        places in their sequences); without it, position_offset, position_offset + 1, ... for every row
        (the layout's: a context-parallel rank's tokens are chunks of the sequence, parallel/attention.py).
        Only a learned table reads them here (rotary positions are applied in attention)."""
        b, s = tokens.shape
        x = self.word(tokens)
        if self.position is not None:
            if positions is None:
                end = position_offset + s * self.tp.cp.size  # CP: s is this rank's share of the sequence
                if end > self.position.num_embeddings:
                    raise ValueError(f"sequence of {end} tokens exceeds "
                                     f"the model's {self.position.num_embeddings} positions")
                positions = sequence_positions(s, position_offset, self.tp, tokens.device)
            elif positions.shape != tokens.shape:
                raise ValueError(f"positions {tuple(positions.shape)} must have the shape of tokens "
                                 f"{tuple(tokens.shape)}")
            x = x + self.position(positions)
        x = x.transpose(0, 1).contiguous()  # [s, b, h]
        if self.tp.sequence_parallel:
            x = T.scatter_to_sequence(x, self.tp)
        if self.training and self.dropout > 0:
            with T.tp_split_rng(self.tp, x.device, active=self.tp.sequence_parallel):
                x = F.dropout(x, self.dropout, training=True)
        return x


class GPT(nn.Module):
    """forward(tokens [b, s]) -> logits [b, s, V/tp]; with `labels` -> per-token loss [b, s].
    A middle or last pipeline stage takes hidden states [s, b, h] instead of tokens."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, tp: T.TPContext = T.NO_TP,
                 layers: range | None = None, pre_process: bool = True, post_process: bool = True,
                 activation_checkpointing: str = "none", device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.cfg, self.tp, self.vocab_size = cfg, tp, vocab_size
        self.pre_process, self.post_process = pre_process, post_process
        self.layers = range(cfg.num_layers) if layers is None else layers
        self.activation_checkpointing = activation_checkpointing
        if pre_process or (post_process and cfg.tie_embeddings):  # the last stage keeps its own tied copy
            self.embedding = Embedding(cfg, vocab_size, tp, pre_process and cfg.position == "learned", **factory)
        self.blocks = nn.ModuleDict({str(i): Block(cfg, tp, **factory) for i in self.layers})
        if post_process:
            self.final_norm = build_norm(cfg.norm, cfg.hidden_size, cfg.layernorm_epsilon, cfg.bias, tp, **factory)
            if not cfg.tie_embeddings:  # an output head of its own, split by vocabulary as the embedding
                self.output = T.VocabParallelEmbedding(vocab_size, cfg.hidden_size, tp, **factory)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None,
                cache: list | None = None, position_offset: int = 0,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """`positions` [b, s]: each token's absolute position; default position_offset, +1, ..."""
        rotary = positions
        if self.cfg.position == "rope" and positions is None:
            rotary = self._rotary_positions(x, position_offset)
        if self.pre_process:
            x = self.embedding(x, position_offset, positions)
        for index, block in enumerate(self.blocks.values()):
            x = self._run_block(block, x, None if cache is None else cache[index], rotary)
        if not self.post_process:
            return x
        x = self.final_norm(x)
        head = self.embedding.word.weight if self.cfg.tie_embeddings else self.output.weight
        logits = T.parallel_lm_logits(x, head, self.tp)  # [s, b, V/tp]
        if labels is None:
            return logits.transpose(0, 1)
        return T.vocab_parallel_cross_entropy(logits, labels.t(), self.tp).t()

    def _rotary_positions(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        """[1, s] from offset; s from the tokens [b, s], or from hidden states [s(/tp with SP), b, h]."""
        s = x.shape[1] if self.pre_process else x.shape[0] * (self.tp.size if self.tp.sequence_parallel else 1)
        return sequence_positions(s, offset, self.tp, x.device)[None]

    def _run_block(self, block: Block, x: torch.Tensor, cache, positions: torch.Tensor | None) -> torch.Tensor:
        if self.activation_checkpointing == "full" and self.training and cache is None:
            return checkpoint(block, x, None, False, positions, use_reentrant=False,
                              context_fn=partial(T.checkpoint_rng_contexts, self.tp))
        return block(x, cache, self.activation_checkpointing == "selective", positions)

    def new_cache(self) -> list[dict]:
        return [{} for _ in self.blocks]


def build_model(cfg: ModelConfig, vocab_size: int, seed: int, **kwargs) -> GPT:
    """A GPT (or one pipeline stage of it) with the seeded initialisation applied; `device` and
    `dtype` in kwargs place the parameters (values: the fp32 initialisation cast to `dtype`)."""
    model = GPT(cfg, vocab_size, **kwargs)
    init_parameters(model, seed)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
