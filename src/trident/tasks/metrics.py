"""Metric arithmetic for evaluation: means, their standard errors, perplexity.

Standard errors follow lm-evaluation-harness so numbers are comparable: for a mean of per-example
values (accuracy is a mean of 0/1) the error is the sample standard deviation (ddof=1) over
sqrt(n), which for 0/1 values equals the binomial error sqrt(p(1-p)/(n-1)); for perplexity, a
non-linear function of the mean, the error comes from a seeded bootstrap.
"""
from __future__ import annotations

import math
import random
from typing import Callable, Sequence


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for an empty sequence (so an empty task is visible, not zero)."""
    return sum(values) / len(values) if values else float("nan")


def mean_stderr(values: Sequence[float]) -> float:
    """Standard error of the mean: sample std (ddof=1) / sqrt(n); NaN when n < 2."""
    n = len(values)
    if n < 2:
        return float("nan")
    mu = mean(values)
    variance = sum((v - mu) ** 2 for v in values) / (n - 1)
    return math.sqrt(variance / n)


def perplexity(logliks: Sequence[float]) -> float:
    """exp(-mean log-likelihood), as the harness aggregates LAMBADA's per-example log-likelihoods."""
    return math.exp(-mean(logliks)) if logliks else float("nan")


def bootstrap_stderr(
    values: Sequence[float], statistic: Callable[[Sequence[float]], float], iters: int = 1000, seed: int = 1234
) -> float:
    """Standard deviation of `statistic` over `iters` resamples (with replacement) drawn with a fixed seed."""
    n = len(values)
    if n < 2:
        return float("nan")
    rng = random.Random(seed)
    stats = [statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(iters)]
    return math.sqrt(sum((s - mean(stats)) ** 2 for s in stats) / (iters - 1))


def argmax(values: Sequence[float]) -> int:
    """Index of the largest value; the first one on ties (deterministic, as numpy.argmax)."""
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best
