"""Started by conftest.py at the start of a test session, at the lowest CPU priority: builds fuzzy
dedup's ahead-of-time kernels (trident.curate.dedup.kernels.build, ~25 s of CPU on a fresh machine) and
fastText's compiled predict (trident.curate.extract.fasttext_model, ~14 s), and
fills numba's JIT cache for the kernels (~24 s) and for the data index builders' loops (~7 s), so
all of it happens in the cores' idle time instead of inside the first test that needs them. Tests
never depend on it having finished: a test that needs the extension waits on the build's own lock,
and a JIT call compiles what the cache lacks.

    python tests/kernel_warmup.py
"""
import numpy as np

from trident.curate.dedup.kernels import build as kernel_build
from trident.curate.extract.fasttext_model import PREDICT_LOOPS


def warm_jit() -> None:
    """Call every kernel of numba_loops once with the argument types the tests and the JIT fallback use."""
    from trident.curate.dedup.kernels import numba_loops as jit
    from trident.curate.dedup.minhash import MinHasher
    from trident.curate.dedup.kernels.loops import _ASCII_SPACE, _WIDE_SPACES, _XXH3_SECRET, _lower_table

    raw = np.frombuffer("a café, “quoted” — and more words ".encode() * 8, dtype=np.uint8).copy()
    bounds = np.array([0, len(raw) // 2, len(raw)], dtype=np.int64)
    buf, norm, _ = jit.normalise_kernel(raw, bounds, _ASCII_SPACE, _WIDE_SPACES, _lower_table())
    buf = np.ascontiguousarray(buf)
    for ngram, word, packed in [(5, False, False), (3, True, False), (5, False, True)]:
        jit.shingle_kernel(buf, norm, ngram, word, packed)
    flat, offsets = (np.ascontiguousarray(a) for a in jit.shingle_kernel(buf, norm, 5, False, False))
    signatures = jit.signature_kernel(flat, offsets, MinHasher(bands=20).multipliers)
    jit.shingle_signature_kernel(buf, norm, 5, False, MinHasher(bands=20).multipliers)
    jit.pair_jaccard(flat, offsets, np.array([0], dtype=np.int64), np.array([1], dtype=np.int64), 0.7)
    jit.band_key_kernel(signatures, 20, _XXH3_SECRET)
    jit.xxh64_of(raw)


def warm_data_loops() -> None:
    """Run trident.data's loops compiled, with the argument types the tests' long and `loop_route` cases use."""
    from trident.data import compiled
    from trident.data.blend import build_blending_indices
    from trident.data.gpt_dataset import build_sample_idx, sort_random_keys

    compiled.PLAIN_UP_TO = -1
    build_blending_indices([0.3, 0.7], 10)
    sizes = np.full(8, 40, dtype=np.int32)
    for doc_idx in (np.arange(8, dtype=np.int32), np.arange(8, dtype=np.int64)):
        build_sample_idx(sizes, doc_idx, 16, 10)
    sort_random_keys(np.random.default_rng(0).random(100))


if __name__ == "__main__":
    kernel_build.LOOPS.aot_module("auto")
    PREDICT_LOOPS.aot_module("auto")
    warm_data_loops()
    warm_jit()
