"""Plain-Python loops compiled with numba on first use: the index builders' sequential parts.

A loop stays ordinary Python (readable, testable as it is); `compiled(fn)` returns numba's
machine-code version, the same operations in the same order (no fastmath), so its results are
bit-identical. numba installs from wheels (no compiler needed) and is imported only when a loop
first runs, so `import trident` stays fast. cache=True keeps the machine code in __pycache__ (when
writable): later processes load it in well under a second instead of compiling again.
"""
from __future__ import annotations

import functools


@functools.cache
def compiled(fn):
    """numba.njit(fn), compiled once per process (and cached on disk)."""
    import numba

    return numba.njit(cache=True, nogil=True, fastmath=False)(fn)
