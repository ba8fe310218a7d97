"""Context parallelism's ring traffic and how much of it the attention compute hides. Pure arithmetic.

Ring attention (parallel/context.py) on a CP group of N ranks, per layer and micro-batch, one rank
holding S/N tokens of every sequence, K/V block |K| = b x S/N x hkv/t x d elements of e bytes:
  forward   N - 1 steps, each sending the K/V block on:  (N-1) x 2|K| e bytes
  backward  N steps: K/V again on N - 1 of them, and the block's fp32 dK/dV on every one:
            (N-1) x 2|K| e + N x 2|K| x 4 bytes
Each exchange is posted before a step's block compute and waited after it, so a step costs
max(compute, exchange): the exposed time is max(0, exchange - compute) per step. A step computes
2c^2 scores per head (c = S/2N, the load-balanced chunks): 2 b h S^2 / (t N^2) FLOPs forward, twice
that backward. Recompute (full or selective) runs the forward ring again in the backward.
"""
from __future__ import annotations

from dataclasses import dataclass

from trident.config import Config
from trident.parallel.layout_rules import ring_attention_bytes



def kv_block_elements(config: Config, layout) -> float:
    """|K|: elements of one rank's K block per layer and micro-batch (b, hkv/t heads, S/cp tokens, d)."""
    m = config.model
    heads = max(m.kv_heads, layout.tp) / layout.tp  # fewer key/value heads than tp: one replicated a rank
    return layout.micro_batch * layout.local_seq(m.seq_length) * heads * m.head_dim


def step_flops(config: Config, layout) -> float:
    """Forward FLOPs of one ring step on one rank: 2c^2 scores a head, QK^T and PV (2 x 2 FLOPs each)."""
    m = config.model
    c = m.seq_length / (2 * layout.cp)
    return 4 * layout.micro_batch * m.num_heads * m.head_dim / layout.tp * 2 * c * c


@dataclass(frozen=True)
class RingCost:
    """One layer, one micro-batch: bytes this rank sends and the seconds not hidden by compute."""
    forward_bytes: float
    backward_bytes: float
    exposed_s: float


def ring_cost(config: Config, layout, element_size: int, speed_flops: float, busbw_gbs: float,
              latency_us: float) -> RingCost:
    """The ring of one layer per micro-batch (recomputed forwards included), on a link of
    `busbw_gbs` and `latency_us`, with the attention computing at `speed_flops`."""
    cp = layout.cp
    if cp <= 1:
        return RingCost(0.0, 0.0, 0.0)
    forward, backward = ring_attention_bytes(kv_block_elements(config, layout), element_size, cp)
    compute = step_flops(config, layout) / speed_flops
    send = lambda nbytes: nbytes / (busbw_gbs * 1e9) + latency_us * 1e-6  # noqa: E731
    forward_exposed = (cp - 1) * max(0.0, send(forward / (cp - 1)) - compute)
    backward_exposed = cp * max(0.0, send(backward / cp) - 2 * compute)
    runs = 2 if layout.checkpointing in ("full", "selective") else 1  # the forward ring again in backward
    return RingCost(runs * forward, backward, runs * forward_exposed + backward_exposed)
