"""Fuzzy dedup's compiled loops: loops (the entry points, tested against dedup.minhash), numba_loops
(the numba code; its hash functions in numba_hashes), build (the ahead-of-time extension through
trident.curate.compiled, `python -m trident.curate.dedup.kernels.build`).
"""
