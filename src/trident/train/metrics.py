"""What a training step reports: peak memory, the metrics.jsonl writer and the console line.
(FLOPs come from trident.flops, the device peak behind MFU from trident.hardware.)"""
from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from pathlib import Path

import torch

from trident.text.storage import is_remote, location

UPLOAD_INTERVAL_S = 30.0  # on an object store: the longest a metrics line waits to be uploaded


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


class MetricsWriter:
    """Appends one JSON object per step to OUT/metrics.jsonl (rank 0 only), and hands the same
    record to each of `loggers` (TensorBoard, W&B: train/loggers.py).

    An object store cannot append: there the lines go to a local copy (an earlier run's object first,
    when appending) that replaces the object whole at `sync()` (the trainer's checkpoints), at most
    UPLOAD_INTERVAL_S seconds after a line, and at close."""

    def __init__(self, path: Path | str | None, append: bool = False, loggers: list | None = None):
        self.path = location(path) if path is not None else None
        self.remote = self.path is not None and is_remote(self.path)
        local = self.path
        if self.remote:
            handle, local = tempfile.mkstemp(prefix="trident-metrics-", suffix=".jsonl")
            os.close(handle)
            if append and self.path.exists():
                self.path.fs.get_file(self.path.path, local)
        self.local = local
        self.file = open(local, "a" if append else "w", buffering=1) if local is not None else None
        self.loggers = loggers or []
        self.uploaded = time.monotonic()

    def write(self, record: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            if self.remote and time.monotonic() - self.uploaded >= UPLOAD_INTERVAL_S:
                self.sync()
        for logger in self.loggers:
            logger.log(record)

    def sync(self) -> None:
        """On an object store, replace the metrics object with every line written so far."""
        if self.remote and self.file is not None:
            self.file.flush()
            self.path.fs.put_file(self.local, self.path.path)
            self.uploaded = time.monotonic()

    def close(self) -> None:
        if self.file is not None:
            self.sync()
            self.file.close()
            if self.remote:
                os.unlink(self.local)
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
    return [json.loads(line) for line in location(path).read_text().splitlines() if line.strip()]
