"""Learning rate (linear warmup, then cosine decay to min_lr, both measured in tokens) and the
batch-size ramp-up of MT-NLG (start at `start` sequences, +`increment` at a time, reaching the
global batch after `over_tokens` tokens). Pure functions of the tokens consumed so far, so a resumed
run recomputes them exactly."""
from __future__ import annotations

import math

from trident.config import TrainConfig


def learning_rate(tokens: int, lr: float, min_lr: float, warmup_tokens: int, decay_tokens: int) -> float:
    if warmup_tokens > 0 and tokens < warmup_tokens:
        return lr * tokens / warmup_tokens
    if tokens >= decay_tokens:
        return min_lr
    progress = (tokens - warmup_tokens) / max(1, decay_tokens - warmup_tokens)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def batch_size(tokens: int, global_batch_size: int, rampup: list | None, seq_length: int) -> int:
    """Global batch (sequences) for the step that starts after `tokens` consumed tokens."""
    if not rampup:
        return global_batch_size
    start, increment, over_tokens = rampup
    increments = (global_batch_size - start) // increment
    if increments == 0:
        return global_batch_size
    tokens_per_increment = over_tokens / increments
    steps_done = int(tokens // tokens_per_increment)
    return min(global_batch_size, start + increment * steps_done)


class TrainSchedule:
    """LR and batch size for a run, from its TrainConfig and sequence length."""

    def __init__(self, train: TrainConfig, seq_length: int):
        self.train, self.seq_length = train, seq_length
        self.decay_tokens = train.decay_tokens or self.total_tokens()

    def batch_size(self, tokens: int) -> int:
        t = self.train
        return batch_size(tokens, t.global_batch_size, t.rampup_batch_size, self.seq_length)

    def lr(self, tokens: int) -> float:
        t = self.train
        return learning_rate(tokens, t.lr, t.min_lr, t.warmup_tokens, self.decay_tokens)

    def batch_sizes(self) -> list[int]:
        """Global batch of every step of the run."""
        sizes, tokens = [], 0
        for _ in range(self.train.steps):
            size = self.batch_size(tokens)
            sizes.append(size)
            tokens += size * self.seq_length
        return sizes

    def total_tokens(self) -> int:
        return sum(self.batch_sizes()) * self.seq_length
