"""Optional source: Hugging Face datasets via the `datasets` package (the hub, or local copies of it).

Used only when no --data-dir is given. Rows are converted to the same document form as the local
readers produce (Task.from_hub), so prompts and metrics are identical whichever source is used.
With TRIDENT_HUB_DIR set, dataset `owner/name` is read from the folder TRIDENT_HUB_DIR/owner/name
(a download of the hub repository, e.g. `hf download --repo-type dataset owner/name --local-dir ...`)
by the same `load_dataset` call, so evaluation runs offline on exactly the hub's files.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from trident.tasks.files import TaskDataError

HUB_DIR_ENV = "TRIDENT_HUB_DIR"
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_source(task) -> tuple[str, str | None, str | None]:
    """(path for load_dataset, config, revision): the hub repository, or its local copy under TRIDENT_HUB_DIR."""
    path, name = task.hub
    local = os.environ.get(HUB_DIR_ENV)
    if not local:
        return path, name, task.hub_revision
    folder = Path(local) / path
    if not folder.is_dir():
        raise TaskDataError(f"{task.name}: {HUB_DIR_ENV}={local} holds no folder {path}/ "
                            f"(a local copy of the hub dataset {path}); use --data-dir with {task.expected}")
    return str(folder), name, None  # a local copy is already the revision that was downloaded


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why a connection to the hub's endpoint (HF_ENDPOINT, else huggingface.co) fails now, or None:
    one quick connect instead of `datasets`' ~25 s of retries offline. None without trying when
    `datasets` is told to work offline (it reads its cache) or a proxy is set (a direct connection
    would say nothing about the proxy's)."""
    if any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in OFFLINE_ENV):
        return None
    if any(os.environ.get(v) for v in PROXY_ENV):
        return None
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname, port), timeout=timeout).close()
    except OSError as error:
        return f"{endpoint.hostname}:{port}: {error}"
    return None


def load_from_hub(task, split: str) -> list[dict]:
    """Rows of task's hub dataset for our split name (train / validation / test)."""
    if task.hub is None or split not in task.hub_splits:
        raise TaskDataError(f"{task.name}: no Hugging Face hub source for split {split!r}; "
                            f"use --data-dir with {task.expected}")
    problem = None if os.environ.get(HUB_DIR_ENV) else hub_unreachable()
    if problem:
        raise TaskDataError(f"{task.name}: the Hugging Face hub cannot be reached ({problem}); use --data-dir "
                            f"with {task.expected} (or HF_HUB_OFFLINE=1 to read the `datasets` cache)")
    try:
        import datasets
    except ImportError as exc:
        raise TaskDataError(f"{task.name}: no --data-dir given and the `datasets` package is not installed "
                            f"(pip install 'trident-lm[hub]'), so the hub cannot be used; "
                            f"expected files: {task.expected}") from exc
    path, name, revision = hub_source(task)
    try:
        rows = datasets.load_dataset(path, name, split=task.hub_splits[split], revision=revision)
    except Exception as exc:  # network, auth or a renamed dataset: all end the same way for the user
        raise TaskDataError(f"{task.name}: could not load {path}{'/' + name if name else ''} "
                            f"split {task.hub_splits[split]} with `datasets` ({exc}); use --data-dir") from exc
    return [dict(row) for row in rows]
