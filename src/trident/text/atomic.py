"""Writing a small file so that a reader sees the old file or the whole new one, never half of it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trident.text.storage import is_remote, location


def write_text_atomic(path: str | Path, text: str) -> Path:
    """`text` into `path` through a temporary file named for this process, then a rename (an object
    store replaces an object whole: written directly there); the folder is created when missing."""
    path = location(path)
    if is_remote(path):
        path.write_text(text)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json_atomic(path: str | Path, obj: Any, **dumps) -> Path:
    """json.dumps(obj, **dumps) (default: indent 1, sorted keys) written with write_text_atomic."""
    return write_text_atomic(path, json.dumps(obj, **(dumps or {"indent": 1, "sort_keys": True})) + "\n")
