"""Few-shot spread: how much a score moves when other examples are drawn for the prompts.

`--fewshot-seeds S` scores each few-shot cell with S independent draws, seeds `seed, seed + 1, ...,
seed + S - 1` (the first is the plain run's), and reports per metric the mean, the sample standard
deviation (n - 1), min and max over the draws, and for accuracy-type metrics the share of examples
whose correctness is not the same in every draw (acc* and exact_match).
"""
from __future__ import annotations

import statistics

ACCURACY_PREFIX = ("acc", "exact_match")  # per-example 0/1 values: correct or not


def draw_seeds(seed: int, draws: int) -> list[int]:
    """The seeds of `draws` independent few-shot draws derived from `seed`."""
    if draws < 1:
        raise ValueError(f"--fewshot-seeds must be >= 1, got {draws}")
    return [seed + i for i in range(draws)]


def spread(seeds: list[int], per_seed_metrics: list[dict[str, float]],
           per_seed_examples: list[list[dict[str, float]]]) -> dict:
    """{"seeds", "metrics": {name: {"per_seed", "mean", "std", "min", "max"[, "flipped"]}}} over the draws."""
    summary = {}
    for name in per_seed_metrics[0]:
        values = [metrics[name] for metrics in per_seed_metrics]
        stats = {"per_seed": values, "mean": statistics.fmean(values),
                 "std": statistics.stdev(values) if len(values) > 1 else float("nan"),
                 "min": min(values), "max": max(values)}
        if name.startswith(ACCURACY_PREFIX):
            stats["flipped"] = flipped_share(name, per_seed_examples)
        summary[name] = stats
    return {"seeds": list(seeds), "metrics": summary}


def flipped_share(name: str, per_seed_examples: list[list[dict[str, float]]]) -> float:
    """Share of examples (those with metric `name`) whose value differs between any two draws."""
    outcomes = [{examples[i][name] for examples in per_seed_examples}
                for i in range(len(per_seed_examples[0])) if name in per_seed_examples[0][i]]
    return sum(len(seen) > 1 for seen in outcomes) / len(outcomes) if outcomes else float("nan")
