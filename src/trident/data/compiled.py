"""Plain-Python loops compiled with numba when they are long: the index builders' sequential parts.

A loop stays ordinary Python (readable, testable as it is); `compiled(fn)` returns numba's
machine-code version, the same operations in the same order (no fastmath), so its results are
bit-identical. numba installs from wheels (no compiler needed) and is imported only when a loop
first runs compiled, so `import trident` stays fast. cache=True keeps the machine code in
__pycache__ (when writable): later processes load it instead of compiling again. Even so a process
pays about 1 s of CPU before its first compiled call (importing numba, loading the cached code),
so `loop` runs a short loop as plain Python instead: a small run's every rank starts that much sooner.
"""
from __future__ import annotations

import functools

# A loop of at most this many steps runs as plain Python (~1-10 us a step: at most ~0.1-0.5 s).
PLAIN_UP_TO = 50_000


@functools.cache
def compiled(fn):
    """numba.njit(fn), compiled once per process (and cached on disk)."""
    import numba

    return numba.njit(cache=True, nogil=True, fastmath=False)(fn)


def loop(fn, steps: int):
    """`fn` itself for a loop of about `steps` steps up to PLAIN_UP_TO, else compiled(fn): both run
    the same operations in the same order, so the results are identical (the tests run both)."""
    return fn if steps <= PLAIN_UP_TO else compiled(fn)
