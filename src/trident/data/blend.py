"""Blending several datasets by weight, as Megatron's build_blending_indices.

Sample n of the blend goes to the dataset whose count of samples so far lags its share the most:
argmax_d (w_d * max(n, 1) - count_d), ties to the lowest index. Every prefix of the blend is then
within one sample per dataset of its weights, and the order is deterministic (no randomness).
The rule is evaluated in float64 exactly as `w_d * float(max(n, 1)) - float(count_d)`; the
compiled loop below gives the same bits as that expression in plain Python (tests keep the plain
loop as the reference).
"""
from __future__ import annotations

import numpy as np

from trident.data.compiled import loop
from trident.data.index_cache import load_or_build


def normalize_weights(weights) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or len(w) == 0:
        raise ValueError("blending needs at least one weight")
    if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"blend weights must be finite, >= 0 and not all 0; got {list(weights)}")
    return w / w.sum()


def _greedy_blend(w, which, local, counts):
    """The greedy loop, in place; compiled by numba with the same float64 operations, no fastmath.

    Errors are computed for all datasets at once (padded to a multiple of 8 with -inf weights,
    which never win) so the compiler can use SIMD; then the first index holding the maximum is
    the argmax with ties to the lowest index, exactly as a scan with `>` finds it.
    """
    num = len(w)
    padded = -(-num // 8) * 8
    weight = np.full(padded, -np.inf)
    weight[:num] = w
    taken = np.zeros(padded)  # counts as float64, as the rule subtracts them
    error = np.empty(padded)
    for n in range(len(which)):
        scale = float(max(n, 1))
        largest = -np.inf
        for d in range(padded):
            error[d] = weight[d] * scale - taken[d]
            largest = max(largest, error[d])
        best = 0
        while error[best] != largest:
            best += 1
        which[n] = best
        local[n] = counts[best]
        counts[best] += 1
        taken[best] += 1.0


def build_blending_indices(weights, num_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset_index, dataset_sample_index) for the greedy blend of `num_samples` samples.

    dataset_index[n] is the dataset serving blend sample n; dataset_sample_index[n] is which of
    that dataset's samples it is (0, 1, 2, ... per dataset). Bit-identical to the rule in the
    module docstring (float64, ties to the lowest index); compiled when long, ~10-20 ns a sample
    for 15 datasets instead of ~10 us in plain Python.
    """
    w = normalize_weights(weights)
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    which = np.empty(num_samples, dtype=np.int16 if len(w) < 2**15 else np.int32)
    local = np.empty(num_samples, dtype=np.int64)
    # the choice is sequential (each depends on all earlier ones) and no per-dataset sort key
    # reproduces it exactly (docs/data.md), so the exact loop runs (compiled when long)
    loop(_greedy_blend, num_samples * len(w))(w, which, local, np.zeros(len(w), dtype=np.int64))
    return which, local


BLEND_ARRAYS = ("dataset_index", "dataset_sample_index", "samples_per_dataset")


def blending_indices(weights, num_samples: int, cache_dir=None, cache_inputs=None,
                     name: str = "blend") -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """build_blending_indices through the on-disk cache: (which, local, counts, from_cache).

    counts[d] is how many samples the blend takes from dataset d (kept in the cache, so a rank
    that reads the cache need not count 100M+ entries).
    """
    weights = normalize_weights(weights)

    def build():
        which, local = build_blending_indices(weights, num_samples)
        return dict(zip(BLEND_ARRAYS, (which, local, samples_per_dataset(which, len(weights)))))

    if cache_dir is None:
        arrays, from_cache = build(), False
    else:
        inputs = {"weights": [float(x) for x in weights], "num_samples": num_samples,
                  "datasets": cache_inputs or []}
        arrays, from_cache = load_or_build(cache_dir, name, inputs, BLEND_ARRAYS, build)
    return (*(arrays[a] for a in BLEND_ARRAYS), from_cache)


def samples_per_dataset(dataset_index: np.ndarray, num_datasets: int) -> np.ndarray:
    """How many samples a blend takes from each dataset."""
    counts = np.zeros(num_datasets, dtype=np.int64)
    chunk = 1 << 24  # counted in slices: no int64 copy of a 100M+ entry index
    for start in range(0, len(dataset_index), chunk):
        part = np.bincount(np.asarray(dataset_index[start : start + chunk], dtype=np.int64))
        if len(part) > len(counts):
            counts = np.pad(counts, (0, len(part) - len(counts)))
        counts[: len(part)] += part
    return counts


class BlendedDataset:
    """Blend sample i = datasets[dataset_index[i]][dataset_sample_index[i]]."""

    def __init__(self, datasets: list, dataset_index: np.ndarray, dataset_sample_index: np.ndarray,
                 from_cache: bool = False, taken: np.ndarray | None = None):
        """`taken`: samples_per_dataset(dataset_index), when the caller has it (else counted here)."""
        if len(dataset_index) != len(dataset_sample_index):
            raise ValueError("dataset_index and dataset_sample_index differ in length")
        self.datasets = datasets
        self.dataset_index = dataset_index
        self.dataset_sample_index = dataset_sample_index
        self.from_cache = from_cache
        if taken is None:
            taken = samples_per_dataset(dataset_index, len(datasets))
        if len(taken) > len(datasets):
            raise ValueError(f"blend refers to dataset {len(taken) - 1}, only {len(datasets)} given")
        for d, (dataset, need) in enumerate(zip(datasets, taken)):
            if len(dataset) < need:
                raise ValueError(f"blend takes {need} samples from dataset {d}, which holds {len(dataset)}")

    def __len__(self) -> int:
        return len(self.dataset_index)

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} samples")
        return self.datasets[int(self.dataset_index[i])][int(self.dataset_sample_index[i])]

    def source(self, i: int) -> tuple:
        """(the dataset sample i comes from, its index there)."""
        return self.datasets[int(self.dataset_index[i])], int(self.dataset_sample_index[i])
