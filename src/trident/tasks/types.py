"""What a model returns for one scored continuation: the input of every task's `score`."""
from __future__ import annotations

from typing import NamedTuple


class Loglikelihood(NamedTuple):
    """Score of one continuation: summed log-prob, all-tokens-greedy flag, continuation length in tokens."""

    logprob: float
    is_greedy: bool
    num_tokens: int
