"""GPT as trained for MT-NLG: learned positions, pre-LayerNorm, GeLU MLP of 4h, tied embeddings.

Written once against trident.parallel.tensor layers; it knows nothing of ranks. Activations are
sequence-first [s, b, h]. A pipeline stage is the same class holding a slice of the layers
(`layers`), the embedding when `pre_process`, and the final norm + tied head when `post_process`.
Parameter names are global (blocks keyed by their global layer index) so checkpoints and the seeded
initialisation (model/init.py) are the same whatever the layout. Parameters are created directly with
the given dtype and device (torch.nn's `device=`, `dtype=`), so nothing is built twice.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trident.config import ModelConfig
from trident.model.init import init_parameters
from trident.parallel import tensor as T
from trident.parallel.sharding import mark

TIED_EMBEDDING = "embedding.word.weight"  # the input embedding, reused as the output head


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: T.TPContext, device=None, dtype=None):
        super().__init__()
        self.head_dim = cfg.hidden_size // cfg.num_heads
        # QKV rows are ordered (head, q|k|v, head_dim) so a contiguous row slice holds whole heads.
        self.qkv = T.ColumnParallelLinear(cfg.hidden_size, 3 * cfg.hidden_size, tp=tp, device=device, dtype=dtype)
        self.proj = T.RowParallelLinear(cfg.hidden_size, cfg.hidden_size, tp=tp, device=device, dtype=dtype)
        self.dropout = cfg.attention_dropout
        self.tp = tp

    def core(self, qkv: torch.Tensor, cache=None) -> torch.Tensor:
        """`cache`: None, a dict (one sequence, extended a token at a time), or a batched cache
        object whose `attend(q, k, v)` stores k, v at each row's own positions and attends over them
        (trident.infer.kv_cache.LayerCache: prompts of different lengths, rows joining mid-batch)."""
        s, b, _ = qkv.shape
        q, k, v = qkv.view(s, b, -1, 3, self.head_dim).permute(3, 1, 2, 0, 4)  # each [b, heads, s, d]
        if cache is not None and not isinstance(cache, dict):
            return cache.attend(q, k, v).permute(2, 0, 1, 3).reshape(s, b, -1)
        causal = True
        if cache is not None:
            if "k" in cache:
                if s != 1:
                    raise ValueError("a KV cache can only be extended one token at a time")
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                causal = False  # the single new query may attend to every cached position
            cache["k"], cache["v"] = k, v
        dropout = self.dropout if self.training else 0.0
        with T.tp_split_rng(self.tp, qkv.device, active=dropout > 0):  # heads are split across TP
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal)
        return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    def forward(self, x: torch.Tensor, cache: dict | None = None, selective: bool = False) -> torch.Tensor:
        qkv = self.qkv(x)
        if selective and cache is None and self.training:
            replay = partial(T.checkpoint_rng_contexts, self.tp)
            out = checkpoint(self.core, qkv, None, use_reentrant=False, context_fn=replay)
        else:
            out = self.core(qkv, cache)
        return self.proj(out)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: T.TPContext, device=None, dtype=None):
        super().__init__()
        self.fc1 = T.ColumnParallelLinear(cfg.hidden_size, cfg.ffn_size, tp=tp, device=device, dtype=dtype)
        self.fc2 = T.RowParallelLinear(cfg.ffn_size, cfg.hidden_size, tp=tp, device=device, dtype=dtype)
        self.approximate = "tanh" if cfg.activation == "gelu_tanh" else "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: T.TPContext, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.ln1 = T.SequenceParallelLayerNorm(cfg.hidden_size, cfg.layernorm_epsilon, tp, **factory)
        self.attention = Attention(cfg, tp, **factory)
        self.ln2 = T.SequenceParallelLayerNorm(cfg.hidden_size, cfg.layernorm_epsilon, tp, **factory)
        self.mlp = MLP(cfg, tp, **factory)
        self.dropout = cfg.hidden_dropout
        self.tp = tp

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.dropout == 0:
            return x
        # Replicated activations need the same mask on every TP rank; sequence-split ones a different one.
        with T.tp_split_rng(self.tp, x.device, active=self.tp.sequence_parallel):
            return F.dropout(x, self.dropout, training=True)

    def forward(self, x: torch.Tensor, cache: dict | None = None, selective: bool = False) -> torch.Tensor:
        x = x + self._drop(self.attention(self.ln1(x), cache, selective))
        return x + self._drop(self.mlp(self.ln2(x)))


class Embedding(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, tp: T.TPContext, positions: bool, device=None, dtype=None):
        super().__init__()
        self.word = T.VocabParallelEmbedding(vocab_size, cfg.hidden_size, tp, device=device, dtype=dtype)
        self.position = None
        if positions:  # an empty table: init_parameters gives the values (nn.Embedding would draw its own)
            table = torch.empty(cfg.seq_length, cfg.hidden_size, device=device, dtype=dtype)
            self.position = nn.Embedding(cfg.seq_length, cfg.hidden_size, _weight=table)
            mark(self.position.weight, None, tp)
        self.dropout = cfg.hidden_dropout
        self.tp = tp

    def forward(self, tokens: torch.Tensor, position_offset: int = 0,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """`positions` [b, s]: each token's absolute position (rows of a batch may be at different
        places in their sequences); without it, position_offset, position_offset + 1, ... for every row."""
        b, s = tokens.shape
        if positions is None:
            if position_offset + s > self.position.num_embeddings:
                raise ValueError(f"sequence of {position_offset + s} tokens exceeds model.seq_length="
                                 f"{self.position.num_embeddings}")
            positions = torch.arange(position_offset, position_offset + s, device=tokens.device)
        elif positions.shape != tokens.shape:
            raise ValueError(f"positions {tuple(positions.shape)} must have the shape of tokens {tuple(tokens.shape)}")
        x = (self.word(tokens) + self.position(positions)).transpose(0, 1).contiguous()  # [s, b, h]
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
        if pre_process or post_process:  # the last stage keeps its own copy of the tied embedding
            self.embedding = Embedding(cfg, vocab_size, tp, positions=pre_process, **factory)
        self.blocks = nn.ModuleDict({str(i): Block(cfg, tp, **factory) for i in self.layers})
        if post_process:
            self.final_norm = T.SequenceParallelLayerNorm(cfg.hidden_size, cfg.layernorm_epsilon, tp, **factory)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None,
                cache: list | None = None, position_offset: int = 0,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_process:
            x = self.embedding(x, position_offset, positions)
        for index, block in enumerate(self.blocks.values()):
            x = self._run_block(block, x, None if cache is None else cache[index])
        if not self.post_process:
            return x
        x = self.final_norm(x)
        logits = T.parallel_lm_logits(x, self.embedding.word.weight, self.tp)  # [s, b, V/tp]
        if labels is None:
            return logits.transpose(0, 1)
        return T.vocab_parallel_cross_entropy(logits, labels.t(), self.tp).t()

    def _run_block(self, block: Block, x: torch.Tensor, cache) -> torch.Tensor:
        if self.activation_checkpointing == "full" and self.training and cache is None:
            return checkpoint(block, x, use_reentrant=False, context_fn=partial(T.checkpoint_rng_contexts, self.tp))
        return block(x, cache, selective=self.activation_checkpointing == "selective")

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
