"""Model FLOPs of one training iteration: the one formula behind the trainer's TFLOP/s and MFU and
the planner's throughput (Narayanan et al. 2021, as docs/reference.md).

Per layer and sequence a forward is 24 s h^2 (QKV, projection and a 4h MLP) + 4 s^2 h (attention
scores and the weighted sum), the output head 2 s h V; a backward costs two forwards and full
activation recomputation one more forward of every layer. Summed over B sequences and L layers:
    F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h))   with recomputation,
and 3/4 of that without (the paper's convention, which scales the head term too).
"""
from __future__ import annotations


def iteration_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h)) with full recomputation; 3/4 of that without."""
    full = 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return full if recompute else 0.75 * full


def model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Model FLOPs of one iteration (forward + backward, no recompute): what MFU counts."""
    return iteration_flops(batch, seq, layers, hidden, vocab, recompute=False)
