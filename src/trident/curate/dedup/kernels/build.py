"""Fuzzy dedup's compiled loops (trident.curate.dedup.kernels.numba_loops, with numba_hashes) as an
ahead-of-time extension module, built and loaded by trident.curate.compiled (where why and how are
told): a process loads them in a millisecond instead of starting numba (~1.2 s of CPU).

    python -m trident.curate.dedup.kernels.build       builds (if needed) and prints the module's path
"""
from __future__ import annotations

import sys
from types import ModuleType

from trident.curate.compiled import CompiledLoops

# Exported name (a numba_loops function) -> its one signature: arrays C-contiguous, as the callers
# in trident.curate.dedup.kernels.loops pass them.
EXPORTS = {
    "xxh64_of": "u8(u1[::1])",
    "normalise_kernel": "Tuple((u1[:], i8[:], b1[:]))(u1[::1], i8[::1], b1[::1], i8[::1], i4[::1])",
    "shingle_kernel": "Tuple((u8[:], i8[:]))(u1[::1], i8[::1], i8, b1, b1)",
    "signature_kernel": "u4[:, ::1](u8[::1], i8[::1], u8[::1])",
    "shingle_signature_kernel": "u4[:, ::1](u1[::1], i8[::1], i8, b1, u8[::1])",
    "pair_jaccard": "f8[::1](u8[::1], i8[::1], i8[::1], i8[::1], f8)",
    "band_key_kernel": "u8[:, ::1](u4[:, ::1], i8, u8[::1])",
}
LOOPS = CompiledLoops("shingle", "trident.curate.dedup.kernels.numba_loops", EXPORTS,
                      also=("trident.curate.dedup.kernels.numba_hashes",))


def kernels() -> ModuleType:
    """The compiled loops, by the names of EXPORTS: the extension module, or numba_loops (the JIT)."""
    return LOOPS.kernels()


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv):
        print("usage: python -m trident.curate.dedup.kernels.build", file=sys.stderr)
        return 2
    print(LOOPS.aot_module("aot").__file__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
