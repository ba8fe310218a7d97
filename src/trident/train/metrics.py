"""FLOPs (Narayanan et al. 2021, as docs/reference.md), TFLOP/s, MFU, and the metrics.jsonl writer."""
from __future__ import annotations

import json
import resource
import time
from functools import lru_cache
from pathlib import Path

import torch

# Dense bf16 peak TFLOP/s of known accelerators (vendor datasheets, no sparsity).
KNOWN_PEAKS = {"A100": 312.0, "H100": 989.0, "H200": 989.0, "H800": 989.0, "A10": 125.0, "L4": 121.0,
               "V100": 125.0, "4090": 165.0, "B200": 2250.0, "GB200": 2500.0}


def iteration_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h)) with full recomputation; 3/4 of that without."""
    full = 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return full if recompute else 0.75 * full


def model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Model FLOPs of one iteration (forward + backward, no recompute): what MFU counts."""
    return iteration_flops(batch, seq, layers, hidden, vocab, recompute=False)


@lru_cache(maxsize=None)
def measured_cpu_peak_tflops(dtype: torch.dtype = torch.float32, trials: int = 7) -> float:
    """Matmul TFLOP/s this CPU sustains with the current thread count: the MFU denominator.

    The best of several short trials, so a moment of other load on the machine does not shrink the
    peak (which would inflate MFU). Low-precision matmuls can be very slow on CPUs without native
    support, so they are measured on smaller matrices."""
    size = 1024 if dtype == torch.float32 else 256
    generator = torch.Generator().manual_seed(0)  # never draw from the training RNG streams
    a = torch.randn(size, size, generator=generator).to(dtype)
    b = torch.randn(size, size, generator=generator).to(dtype)
    torch.mm(a, b)
    best = 0.0
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(3):
            torch.mm(a, b)
        best = max(best, 3 * 2.0 * size**3 / (time.perf_counter() - start))
    return best / 1e12


def peak_tflops(device: torch.device, dtype: torch.dtype, configured: float = 0.0) -> float:
    """Per-device peak: the configured value, else a known GPU's bf16 peak, else measured on CPU."""
    if configured > 0:
        return configured
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in KNOWN_PEAKS.items():
            if key in name:
                return value if dtype != torch.float32 else value / 16.0  # fp32 without TF32: ~1/16
        return 0.0
    return measured_cpu_peak_tflops(dtype)


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


class MetricsWriter:
    """Appends one JSON object per step to OUT/metrics.jsonl (rank 0 only)."""

    def __init__(self, path: Path | None, append: bool = False):
        self.path = path
        self.file = open(path, "a" if append else "w", buffering=1) if path is not None else None

    def write(self, record: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def console_line(record: dict) -> str:
    parts = [f"step {record['step']:>6}", f"loss {record['loss']:.4f}", f"lr {record['lr']:.3e}",
             f"gnorm {record['grad_norm']:.3f}", f"batch {record['batch_size']}",
             f"tok/s {record['tokens_per_s']:,.0f}", f"TFLOP/s {record['tflops']:.3g}", f"MFU {record['mfu']:.1%}"]
    if record.get("val_loss") is not None:
        parts.append(f"val {record['val_loss']:.4f}")
    if record.get("skipped"):
        parts.append(f"SKIPPED (scale {record['loss_scale']:g})")
    return " | ".join(parts)


def read_metrics(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
