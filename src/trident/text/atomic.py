"""Writing a JSON file so that a reader sees the old file or the whole new one, never half of it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trident.text.storage import is_remote, location


def write_json_atomic(path: str | Path, obj: Any, **dumps) -> Path:
    """json.dumps(obj, **dumps) (default: indent 1, sorted keys) into `path` through a temporary file
    named for this process, then a rename; the folder is created when missing."""
    path = location(path)
    text = json.dumps(obj, **(dumps or {"indent": 1, "sort_keys": True})) + "\n"
    if is_remote(path):
        path.write_text(text)  # one object: replaced whole, never seen half-written
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
