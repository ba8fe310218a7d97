"""Optional source: the Hugging Face hub via the `datasets` package (needs network).

Used only when no --data-dir is given. Rows are converted to the same document form as the local
readers produce (Task.from_hub), so prompts and metrics are identical whichever source is used.
"""
from __future__ import annotations

from trident.tasks.files import TaskDataError


def load_from_hub(task, split: str) -> list[dict]:
    """Rows of task's hub dataset for our split name (train / validation / test)."""
    if task.hub is None or split not in task.hub_splits:
        raise TaskDataError(f"{task.name}: no Hugging Face hub source for split {split!r}; "
                            f"use --data-dir with {task.expected}")
    try:
        import datasets
    except ImportError as exc:
        raise TaskDataError(f"{task.name}: no --data-dir given and the `datasets` package is not installed "
                            f"(pip install datasets), so the hub cannot be used; expected files: {task.expected}") from exc
    path, name = task.hub
    try:
        rows = datasets.load_dataset(path, name, split=task.hub_splits[split])
    except Exception as exc:  # network, auth or a renamed dataset: all end the same way for the user
        raise TaskDataError(f"{task.name}: could not load {path}{'/' + name if name else ''} "
                            f"split {task.hub_splits[split]} from the hub ({exc}); use --data-dir") from exc
    return [dict(row) for row in rows]
