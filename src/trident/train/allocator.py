"""Keep freed CPU memory in the process (glibc malloc), so each step's tensors reuse the last step's pages.

By default glibc serves large allocations with fresh mmaps (over a threshold it moves as it sees
chunks freed, from 128 KiB) and hands a freed heap top back to the OS, so a training step that frees
and re-allocates the same activation sizes page-faults them in again, every page zeroed by the
kernel, every step. Setting the mmap threshold to its maximum (32 MiB on 64-bit) and turning heap
trimming off keeps that memory in the heap for reuse (GLIBC_TUNABLES' mmap_threshold and
trim_threshold, applied at run time). Allocations over 32 MiB are still fresh mmaps: glibc allows
no higher threshold. Measured by benchmarks/allocator.py on one pipeline stage of the pp-2
benchmarks: 5-17 thousand minor page faults a step down to 0, and 4-5% less CPU a step. Applied as
early as the process can (`trident train` does it before the process group and the model exist):
set after them, the same setting left ZB-H2's CPU per step 3-4% above DeepSpeed's in the same
processes, against 1.5% when set first (docs/pipeline.md). The cost: the process keeps its peak
heap instead of shrinking between steps. Where another malloc is preloaded (jemalloc, tcmalloc),
glibc's settings do not reach it.
"""
from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: larger values are refused
NO_TRIM = -1  # mallopt(3): a trim threshold of -1 turns trimming off (a C int: 4 GiB would wrap to 0)


def wanted(keep: bool, device: str) -> bool:
    """Whether a run with train.malloc_keep_freed=`keep` on train.device=`device` keeps freed memory:
    CPU runs only (on GPUs the activations live in CUDA's caching allocator)."""
    import torch

    return keep and (device == "cpu" or (device == "auto" and not torch.cuda.is_available()))


def keep_freed_memory() -> str:
    """Apply the setting where the C library is glibc; return a line saying what was done."""
    if platform.libc_ver()[0] != "glibc":
        return f"malloc: not glibc ({platform.system()}), allocator left as it is"
    libc = ctypes.CDLL(None)  # the C library this process already runs on
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    applied = [libc.mallopt(option, value) == 1
               for option, value in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX), (M_TRIM_THRESHOLD, NO_TRIM))]
    if not all(applied):
        return f"malloc: glibc refused mallopt (mmap threshold {applied[0]}, trim off {applied[1]})"
    return f"malloc: freed memory kept for reuse (mmap threshold {MMAP_THRESHOLD_MAX >> 20} MiB, trimming off)"
