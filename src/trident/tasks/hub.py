"""Optional source: Hugging Face datasets via the `datasets` package (the hub, or local copies of it).

Used only when no --data-dir is given. Rows are converted to the same document form as the local
readers produce (Task.from_hub), so prompts and metrics are identical whichever source is used.
With TRIDENT_HUB_DIR set, dataset `owner/name` is read from the folder TRIDENT_HUB_DIR/owner/name
(a download of the hub repository, e.g. `hf download --repo-type dataset owner/name --local-dir ...`)
by the same `load_dataset` call, so evaluation runs offline on exactly the hub's files.
"""
from __future__ import annotations

import os
from pathlib import Path

from trident.tasks.files import TaskDataError

HUB_DIR_ENV = "TRIDENT_HUB_DIR"


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


def load_from_hub(task, split: str) -> list[dict]:
    """Rows of task's hub dataset for our split name (train / validation / test)."""
    if task.hub is None or split not in task.hub_splits:
        raise TaskDataError(f"{task.name}: no Hugging Face hub source for split {split!r}; "
                            f"use --data-dir with {task.expected}")
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
