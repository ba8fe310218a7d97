"""What a training step reports: peak memory, the metrics.jsonl writer and the console line.
(FLOPs come from trident.flops, the device peak behind MFU from trident.hardware.)"""
from __future__ import annotations

import json
import resource
from pathlib import Path

import torch


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


class MetricsWriter:
    """Appends one JSON object per step to OUT/metrics.jsonl (rank 0 only), and hands the same
    record to each of `loggers` (TensorBoard, W&B: train/loggers.py)."""

    def __init__(self, path: Path | None, append: bool = False, loggers: list | None = None):
        self.path = path
        self.file = open(path, "a" if append else "w", buffering=1) if path is not None else None
        self.loggers = loggers or []

    def write(self, record: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
        for logger in self.loggers:
            logger.log(record)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        for logger in self.loggers:
            logger.close()


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
