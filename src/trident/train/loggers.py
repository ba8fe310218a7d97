"""Where a run's metrics go besides metrics.jsonl: TensorBoard event files and Weights & Biases.

Rank 0 only. Every numeric field of a metrics.jsonl record is logged under its own name at the
record's step (`val_loss` on validation steps, `skipped` as 0/1), so the curves in either tool are
metrics.jsonl value for value; the resolved config goes along (as text in TensorBoard, as the run
config in W&B). Both libraries are optional extras, imported only when asked for.
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml

from trident.config import Config, ConfigError
from trident.text.storage import require_local


def scalars(record: dict) -> dict[str, float]:
    """The numeric fields of a metrics record (booleans as 0/1; None and non-numbers left out)."""
    out = {}
    for key, value in record.items():
        if key != "step" and isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
            out[key] = float(value)
    return out


class TensorBoardLogger:
    """Event files under OUT/tensorboard (`tensorboard --logdir OUT/tensorboard`)."""

    def __init__(self, out: Path, config: Config):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise ConfigError("logging.tensorboard=true needs the tensorboard package: "
                              "pip install 'trident-lm[tensorboard]'") from error
        self.writer = SummaryWriter(log_dir=str(Path(out) / "tensorboard"))
        self.writer.add_text("config", "```\n" + yaml.safe_dump(config.to_dict(), sort_keys=False) + "```")

    def log(self, record: dict) -> None:
        for key, value in scalars(record).items():
            self.writer.add_scalar(key, value, record["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """A W&B run in project `logging.wandb_project`; `logging.wandb_mode=offline` needs no network
    (the run is kept under OUT/wandb for `wandb sync`)."""

    def __init__(self, out: Path, config: Config):
        try:
            import wandb
        except ImportError as error:
            raise ConfigError("logging.wandb_project needs the wandb package: pip install 'trident-lm[wandb]'") from error
        self.wandb = wandb
        self.run = wandb.init(project=config.logging.wandb_project, mode=config.logging.wandb_mode, dir=str(out),
                              config=config.to_dict(), name=Path(out).resolve().name)

    def log(self, record: dict) -> None:
        self.run.log(scalars(record), step=record["step"])

    def close(self) -> None:
        self.run.finish()


def check_logger_folder(config: Config, out) -> None:
    """TensorBoard's and W&B's writers keep their files in a local folder under OUT: a URL --out with
    either asked for is refused (UnsupportedLocation, a ConfigError) before the run starts."""
    for key, wanted in (("logging.tensorboard", config.logging.tensorboard),
                        ("logging.wandb_project", config.logging.wandb_project)):
        if wanted:
            require_local(out, "--out", f"{key} writes its files with a writer of local files only; metrics.jsonl "
                                        f"and checkpoints go to a URL, so drop {key} or give a local --out")


def build_loggers(config: Config, out: Path) -> list:
    """The loggers the config asks for (rank 0 calls this; the others log nothing)."""
    check_logger_folder(config, out)
    loggers = []
    if config.logging.tensorboard:
        loggers.append(TensorBoardLogger(out, config))
    if config.logging.wandb_project:
        loggers.append(WandbLogger(out, config))
    return loggers
