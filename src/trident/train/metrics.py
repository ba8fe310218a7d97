"""What a training step reports: peak memory, the metrics.jsonl writer and the console line.
(FLOPs come from trident.flops, the device peak behind MFU from trident.hardware.)"""
from __future__ import annotations

import json
import resource
from pathlib import Path

import torch

from trident.text.appended import AppendedObject, read_lines
from trident.text.storage import is_remote, location

UPLOAD_INTERVAL_S = 30.0  # on an object store: seconds between uploads of new lines (logging.metrics_upload_s)


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


class MetricsWriter:
    """Appends one JSON object per step to OUT/metrics.jsonl (rank 0 only), and hands the same
    record to each of `loggers` (TensorBoard, W&B: train/loggers.py).

    An object store cannot append: there the lines go up in parts from a background thread every
    `upload_s` seconds, at `sync()` (the trainer's checkpoints) and at close, which joins them into
    the one object metrics.jsonl (text/appended.py; `read_metrics` reads the parts too)."""

    def __init__(self, path: Path | str | None, append: bool = False, loggers: list | None = None,
                 upload_s: float = UPLOAD_INTERVAL_S):
        self.path = location(path) if path is not None else None
        self.remote = self.path is not None and is_remote(self.path)
        self.file = self.log = None
        if self.remote:
            self.log = AppendedObject(self.path, upload_s, append)
        elif self.path is not None:
            self.file = open(self.path, "a" if append else "w", buffering=1)
        self.loggers = loggers or []

    def write(self, record: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
        if self.log is not None:
            self.log.append(json.dumps(record))
        for logger in self.loggers:
            logger.log(record)

    def sync(self) -> None:
        """On an object store, upload the lines not yet uploaded now (StoreError when it fails)."""
        if self.log is not None:
            self.log.upload()

    def close(self, failed: bool = False) -> None:
        """`failed`: the run is ending on an error of its own, which a store failure here must not hide."""
        if self.file is not None:
            self.file.close()
        if self.log is not None:
            self.log.close(quiet=failed)
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
    """Every record of a run's metrics.jsonl, local or on a store (its uploaded parts included)."""
    return [json.loads(line) for line in read_lines(path) if line.strip()]
