"""Activation memory of trident's own trainer (model/gpt.py, parallel/tensor.py, SDPA), tensor by tensor.

Pure arithmetic, like plan/memory.py, which uses it for the default plan; Megatron-2021's program (the
paper's, `trident plan --paper`) is memory.layer_activation_bytes' Korthikanti formulas. Bytes on one
TP rank, per micro-batch. Each term names the tensor the trainer's autograd graph keeps, found by
counting every live tensor of a rehearsal (docs/planner.md, "What the trainer keeps"):

- QKV and fc1 inputs are kept at full sequence length: with sequence parallelism the column-parallel
  linear saves the all-gathered input (Megatron re-gathers it in backward instead), without it the
  LayerNorm output is replicated over TP.
- LayerNorm inputs: on CUDA, autocast runs LayerNorm in fp32 and it saves an fp32 copy of its input
  (the bf16 residual itself is then not kept); on the CPU (and in fp32) it saves the residual.
- SDPA (flash in 16-bit, memory-efficient attention for fp32 on CUDA, the CPU's flash kernel): no
  s x s scores, an fp32 log-sum-exp per row (on the CPU with attention dropout, SDPA's math path
  keeps fp32 scores: math_attention_bytes); its output is the projection's input (a view of it,
  except CUDA's memory-efficient kernel, whose layout needs a copy).
- The loss: the vocabulary-parallel cross-entropy keeps fp32 probabilities [s, b, V/t] per micro-batch
  and briefly holds the logits, an fp32 copy and the exponentials; with tp = 1 torch's cross-entropy keeps
  fp32 log-probabilities and its backward briefly holds three [s, b, V] fp32 tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

DEVICES = ("cuda", "cpu")
FP32 = 4


@dataclass(frozen=True)
class Shape:
    """The sizes one TP rank's activations are made of."""
    s: int  # sequence length
    b: int  # micro-batch
    h: int
    f: int  # MLP width
    a: int  # heads
    vocab: int  # padded vocabulary
    tp: int
    sp: int  # tp with sequence parallelism, else 1: the split of the residual stream
    e: int  # bytes of an activation element (training precision)
    device: str  # "cuda" or "cpu": autocast's rules differ
    kv: float = 1.0  # key/value heads a rank holds over its query heads (grouped-query attention)
    grouped: bool = False  # separate Q and KV projections (fewer key/value heads than heads)
    norm: str = "layernorm"
    swiglu: bool = False
    rope: bool = False
    cp: int = 1  # context parallelism: `s` is then this rank's seq_length / cp tokens (ring attention)

    @property
    def sbh(self) -> int:
        return self.s * self.b * self.h

    @property
    def ln_input(self) -> float:
        """What one norm keeps: LayerNorm its input, an fp32 copy under CUDA autocast, else the residual
        itself; RMSNorm (fp32 on every device) its fp32 input (a copy in 16-bit) and the normalised
        output the weight multiplies."""
        if self.norm == "rmsnorm":
            return (max(self.e, FP32) + self.e) * self.sbh / self.sp
        element = FP32 if self.device == "cuda" else self.e
        return element * self.sbh / self.sp


def shape(config, layout, device: str) -> Shape:
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    m = config.model
    return Shape(s=layout.local_seq(m.seq_length), b=layout.micro_batch, h=m.hidden_size, f=m.ffn_size, a=m.num_heads,
                 vocab=m.padded_vocab_size(layout.tp), tp=layout.tp, sp=layout.sequence_split,
                 e=4 if config.train.precision == "fp32" else 2, device=device,
                 kv=max(m.kv_heads, layout.tp) / m.num_heads,  # fewer than tp: one replicated a rank
                 grouped=m.kv_heads != m.num_heads, norm=m.norm, swiglu=m.mlp == "swiglu", rope=m.position == "rope",
                 cp=layout.cp)


def layer_bytes(config, x: Shape, mode: str) -> float:
    """Bytes one transformer layer keeps for backward per micro-batch (`full`: its checkpointed input;
    `selective` recomputes only the attention core, whose saved tensors SDPA already keeps small)."""
    e, sbh, t = x.e, x.sbh, x.tp
    if mode == "full":
        return e * sbh / x.sp
    gathered = 2 * e * sbh  # QKV and fc1 inputs, full sequence length
    mlp = 4 if x.swiglu else 2  # gate, SiLU, up and their product; or fc1 and GeLU outputs
    # Q, K, V (K and V of the key/value heads), the attention output; the MLP's
    split = ((1 + 2 * x.kv) * e * sbh + e * sbh + mlp * e * x.s * x.b * x.f) / t
    if x.rope and mode == "none":
        # SDPA keeps the rotated Q and K (rotation by constant angles keeps only the angles); the
        # projection's output stays only where it holds V: the fused QKV, not grouped attention's Q
        split += ((1 + x.kv) - (1 if x.grouped else 0)) * e * sbh / t
    if x.device == "cuda" and e == FP32:
        split += e * sbh / t  # memory-efficient attention's output layout: the projection input is a copy
    core = 0.0
    if mode == "none":
        core = math_attention_bytes(config, x) if math_attention(config, x) else FP32 * x.a * x.s * x.b / t
    masks = 2 * sbh / x.sp if config.model.hidden_dropout > 0 else 0.0  # one byte an element
    return 2 * x.ln_input + gathered + split + core + masks


def math_attention(config, x: Shape) -> bool:
    """The CPU's SDPA has no fused kernel with dropout: it takes the math path (CUDA's flash does not)."""
    return x.device == "cpu" and config.model.attention_dropout > 0


def math_attention_bytes(config, x: Shape) -> float:
    """What SDPA's math path keeps on the CPU, in fp32 whatever the training precision: the softmax,
    the (float) dropout mask and the dropped probabilities, s x s per head, and the scaled Q and K and
    V (an fp32 copy of V in 16-bit training)."""
    copies = 3 if x.e < FP32 else 2
    return (3 * FP32 * x.a * x.s * x.s * x.b + copies * FP32 * x.sbh) / x.tp


def backward_working_set(config, x: Shape, mode: str) -> float:
    """Bytes one layer's backward needs beyond what it keeps: the incoming gradient (full length in the
    MLP), the GeLU-input gradient beside the GeLU output's, a 16/32-bit weight gradient before it is
    added to the fp32 buffer; with full recompute, the layer's recomputed activations as well."""
    e = x.e
    mlp = 2 if x.swiglu else 1  # SwiGLU: the gradients of both branches
    extra = e * x.sbh + mlp * e * x.s * x.b * x.f / x.tp + e * x.h * x.f / x.tp
    if x.cp > 1:  # the ring's backward is the larger moment when its buffers outweigh the MLP's gradients
        extra = max(extra, e * x.sbh + ring_working_set(x))
    if mode == "full":
        extra += layer_bytes(config, x, "none")
    elif mode == "selective" and math_attention(config, x):
        extra += math_attention_bytes(config, x)  # the recomputed attention core
    return extra


def kv_block_bytes(x: Shape, element: int) -> float:
    """One ring block: this rank's K and V ([b, hkv/t, s/cp, d] each) in `element`-byte elements."""
    return 2 * element * x.sbh * x.kv / x.tp


def ring_working_set(x: Shape) -> float:
    """What ring attention's backward (parallel/context.py) holds beyond the kept tensors: two K/V
    blocks in the ring (the one computing, the next arriving), two fp32 dK/dV blocks (this step's and
    the sum travelling in), an fp32 copy of K/V, and fp32 query-sized tensors: dQ, plus the fp32
    copies of Q, the output and its gradient in 16-bit training."""
    query_sized = (4 if x.e < FP32 else 1) * FP32 * x.sbh / x.tp
    fp32_kv = kv_block_bytes(x, FP32) if x.e < FP32 else 0.0
    return 2 * kv_block_bytes(x, x.e) + 2 * kv_block_bytes(x, FP32) + fp32_kv + query_sized


def first_stage_extra(x: Shape, mode: str) -> float:
    """With sequence parallelism the embedding's full-length output stays alive under the first
    block's input (a narrow view of it) while that input is kept: by the checkpoint (full), or by the
    first LayerNorm where it saves the residual itself (the CPU; CUDA keeps an fp32 copy instead)."""
    if x.sp == 1 or (mode != "full" and x.device == "cuda"):
        return 0.0
    return x.e * x.sbh * (1 - 1 / x.sp)


def last_stage_kept(x: Shape) -> float:
    """Kept per micro-batch after the last layer: the final LayerNorm's input and its output (the
    head's input, full length) and the loss's fp32 probabilities (s b V/t; tp = 1: log-probabilities)."""
    norm = x.ln_input + x.e * x.sbh  # the final norm is never recomputed
    return norm + FP32 * x.s * x.b * x.vocab / x.tp


def loss_working_set(x: Shape) -> float:
    """Bytes the loss needs for a moment beyond its kept probabilities. Vocabulary-parallel: the
    logits, their fp32 copy (the logits themselves in fp32) and the shifted logits, (e + 4) s b V/t;
    torch's cross-entropy (tp = 1): its backward's two further fp32 [s, b, V] tensors."""
    logits = x.s * x.b * x.vocab / x.tp
    return (x.e + FP32) * logits if x.tp > 1 else 2 * FP32 * logits
