"""train/allocator.py: on glibc, after keep_freed_memory() a step's freed tensors are reused by the
next step instead of being faulted in again; the trainer applies it on CPU unless
train.malloc_keep_freed=false. The probe process starts from glibc's initial thresholds (128 KiB,
pinned through GLIBC_TUNABLES: by default glibc moves them as it sees chunks freed, so how many faults
a process takes without the setting depends on what it allocated before)."""
import json
import os
import platform
import subprocess
import sys

import pytest

PROBE = """
import ctypes, json, resource, torch
from trident.train.allocator import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
if not hasattr(libc, "mallinfo2"):  # glibc < 2.33
    print(json.dumps({"skip": "glibc without mallinfo2"}))
    raise SystemExit(0)
libc.mallinfo2.restype = MallInfo2

def step():
    # a step's activations: ten 8 MiB tensors alive together (80 MiB, 20480 pages), then all freed
    faults, info = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, libc.mallinfo2()
    held = [torch.ones(2 * 2**20) for _ in range(10)]
    peak = libc.mallinfo2()
    del held
    after = libc.mallinfo2()
    return {"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
            "mmapped_mib": (peak.hblkhd - info.hblkhd) / 2**20,  # served by fresh mmaps, unmapped on free
            "trimmed_mib": (peak.arena - after.arena) / 2**20}  # heap handed back to the OS on free

step()
default = step()
line = keep_freed_memory()
step(), step()  # the heap grows to the step's size once
kept = [step() for _ in range(5)]
print(json.dumps({"default": default, "kept": kept, "line": line}))
"""


@pytest.mark.timeout(60)
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the knob is glibc's; elsewhere it reports and does nothing")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    initial = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=50, check=True,
                         env={**os.environ, **initial}).stdout
    got = json.loads(out.strip().splitlines()[-1])
    if "skip" in got:
        pytest.skip(got["skip"])
    default, kept = got["default"], got["kept"]
    assert default["mmapped_mib"] >= 80  # each tensor mmapped afresh, its pages faulted in every step
    assert all(k["mmapped_mib"] == 0 and k["trimmed_mib"] == 0 for k in kept)  # the heap serves and keeps it
    # ... so a step reuses the last step's pages (median of 5; relative, whatever the page size or THP)
    assert 20 * sorted(k["faults"] for k in kept)[2] < default["faults"]
    assert got["line"].startswith("malloc: freed memory kept for reuse")


def test_trainer_applies_it_on_cpu_unless_told_not_to(tmp_path):
    from train_fixtures import VOCAB, RandomTokens, tiny_config
    from trident.train.trainer import Trainer

    for keep in (True, False):
        config = tiny_config(f"train.malloc_keep_freed={str(keep).lower()}", "train.device=cpu")
        lines: list = []
        Trainer(config, tmp_path / str(keep), datasets=(RandomTokens(config.model.seq_length), None),
                vocab_size=VOCAB, log=lambda *a, **k: lines.append(" ".join(map(str, a))))
        assert any(line.startswith("malloc:") for line in lines) == keep


def test_only_cpu_runs_keep_freed_memory(monkeypatch):
    import torch

    from trident.train.allocator import wanted

    for gpu in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
        assert wanted(True, "cpu") and not wanted(False, "cpu") and not wanted(True, "cuda")
        assert wanted(True, "auto") is not gpu and not wanted(False, "auto")
