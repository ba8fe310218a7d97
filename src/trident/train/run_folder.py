"""Which `trident train --out DIR` may write into DIR.

A run id is shared by every rank and every torchrun restart of one `trident train` invocation, so
a restart re-enters its own folder. A later invocation may reuse the folder only as a resume: with
checkpoint.load=auto and the same model and data sections as the run recorded in the folder's marker.
"""
from __future__ import annotations

import json
import os
import socket
import uuid

from trident.config import Config
from trident.data.run_folder import RunFolder

RUN_ID_ENV = "TRIDENT_RUN_ID"
# what `trident train` writes into its folder; --overwrite removes these when a marker says so
TRAIN_OUTPUTS = ["metrics.jsonl", "metrics.jsonl.parts", "config.yaml", "tokenizer.json", "timeline_step*.json",
                 "checkpoints", "preempted.json", "debug"]
# what `trident launch` and Slurm put into the folder before the first rank starts (debug/: NCCL's dumps)
PREPARED = ("launch.sbatch", "slurm-*.out", "debug")


def run_id() -> str:
    """This invocation's id: new in the launching process, whose ranks inherit it (RUN_ID_ENV); under
    a torchrun started by hand, torchrun's job id, or its agent process (shared by the restarts)."""
    if "LOCAL_RANK" not in os.environ:
        return uuid.uuid4().hex
    if RUN_ID_ENV in os.environ:
        return os.environ[RUN_ID_ENV]
    job = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    return f"torchrun:{job}" if job != "none" else f"torchrun:{socket.gethostname()}:{os.getppid()}"


def resume_key(config: Config) -> dict:
    """What makes two runs the same run: the model and the data (JSON-normalised)."""
    return json.loads(json.dumps({"model": config.to_dict()["model"], "data": config.to_dict()["data"]}))


def claim_train_folder(config: Config, folder: RunFolder, overwrite: bool, writer: bool) -> None:
    """Raise OutputFolderError unless `folder` is empty, this invocation's own (a restart), or a
    resume (checkpoint.load=auto, same model and data); `writer` (one process) stamps the folder and,
    with overwrite, removes the earlier trident run's outputs so load=auto cannot mix two runs."""
    key, rid = resume_key(config), folder.run_id
    resuming = config.checkpoint.load == "auto"
    marker = folder.claim(
        overwrite, same_run=lambda m: m.get("run_id") == rid or (resuming and m.get("resume") == key),
        resume_hint="" if resuming else " and checkpoint.load is not auto (a resume)", prepared=PREPARED)
    if not writer:
        return
    if overwrite and (marker or {}).get("run_id") != rid:
        folder.remove_own(marker, TRAIN_OUTPUTS)
    folder.stamp({"run_id": rid, "resume": key})
