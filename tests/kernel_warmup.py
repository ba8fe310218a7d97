"""Started by conftest.py at the start of a test session, at the lowest CPU priority: builds fuzzy
dedup's ahead-of-time kernels (trident.curate.kernel_build, ~25 s of CPU on a fresh machine) and
fills numba's JIT cache for the kernels (~24 s), so both happen in the cores' idle time instead of
inside the first test that needs them. Tests never depend on it having finished: a test that needs
the extension waits on the build's own lock, and a JIT call compiles what the cache lacks.

    python tests/kernel_warmup.py
"""
import numpy as np

from trident.curate import kernel_build


def warm_jit() -> None:
    """Call every kernel of shingle_jit once with the argument types the tests and the JIT fallback use."""
    from trident.curate import shingle_jit as jit
    from trident.curate.minhash import MinHasher
    from trident.curate.shingle_kernel import _ASCII_SPACE, _WIDE_SPACES, _XXH3_SECRET

    raw = np.frombuffer("a café, “quoted” — and more words ".encode() * 8, dtype=np.uint8).copy()
    bounds = np.array([0, len(raw) // 2, len(raw)], dtype=np.int64)
    buf, norm = jit.normalise_kernel(raw, bounds, _ASCII_SPACE, _WIDE_SPACES)
    buf = np.ascontiguousarray(buf)
    for ngram, word in [(5, False), (3, True)]:
        jit.shingle_kernel(buf, norm, ngram, word)
    flat, offsets = (np.ascontiguousarray(a) for a in jit.shingle_kernel(buf, norm, 5, False))
    signatures = jit.signature_kernel(flat, offsets, MinHasher(bands=20).multipliers)
    jit.pair_jaccard(flat, offsets, np.array([0], dtype=np.int64), np.array([1], dtype=np.int64))
    jit.band_key_kernel(signatures, 20, _XXH3_SECRET)
    jit.xxh64_of(raw)


if __name__ == "__main__":
    kernel_build.aot_module("auto")
    warm_jit()
