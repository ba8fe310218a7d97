"""Model FLOPs of one training iteration: the one formula behind the trainer's TFLOP/s and MFU and
the planner's throughput (Narayanan et al. 2021, as docs/reference.md).

The convention (docs/training.md#mfu; the 55% MFU target is stated in it): 2 FLOPs per multiply-add
of every matmul, attention's two s x s products counted whole (no causal halving), a backward costs
two forwards, the output head is counted once forward and once backward (never recomputed), and
nothing else (norms, softmax, optimizer) counts. Per layer and sequence a forward is 2 s W (W: the
layer's matmul weights; 12 h^2 for GPT's QKV, projection and 4h MLP) + 4 s^2 h (attention scores and
the weighted sum), the output head 2 s h V. Summed over B sequences and L layers, for GPT:
    F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h))   with full activation recomputation (the paper's
                                                 formula: one more forward of every layer),
    M = 72 B s L h^2 (1 + s/(6h)) + 6 B s h V     model FLOPs, what MFU counts (no recomputation).
M is not 3/4 of F: recomputation re-runs the layers, not the head. Llama-style layers change only W
(block_weights): grouped-query attention has fewer key/value rows, SwiGLU a third matrix.
"""
from __future__ import annotations


def block_weights(model) -> int:
    """Matmul weights of one transformer layer of a ModelConfig: q, k, v, output projection, MLP."""
    h, f = model.hidden_size, model.ffn_size
    kv = model.kv_heads * (h // model.num_heads)
    attention = 2 * h * h + 2 * h * kv
    mlp = (3 if model.mlp == "swiglu" else 2) * h * f
    return attention + mlp


def iteration_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool,
                    layer_weights: int | None = None) -> float:
    """B ((4 or 3) (2 s L W + 4 s^2 L h) + 6 s h V): the layers run forward, backward (two forwards)
    and, with full recomputation, one more forward; the head forward and backward only.
    `layer_weights`: W (default GPT's 12 h^2)."""
    weights = 12 * hidden**2 if layer_weights is None else layer_weights
    layer_forward = 2 * seq * layers * weights + 4 * seq**2 * layers * hidden
    head = 6 * seq * hidden * vocab
    return float(batch) * ((4 if recompute else 3) * layer_forward + head)


def model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int,
                layer_weights: int | None = None) -> float:
    """Model FLOPs of one iteration (forward + backward, no recompute): what MFU counts."""
    return iteration_flops(batch, seq, layers, hidden, vocab, recompute=False, layer_weights=layer_weights)
