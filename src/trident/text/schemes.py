"""Whether a path is a URL of an object store or a local path: below storage.py and the store
failure modules, which all ask."""
from __future__ import annotations

import os

LOCAL_PROTOCOLS = ("", "file", "local")


def protocol(path) -> str:
    """The URL scheme of `path` ('' for a plain local path)."""
    text = os.fspath(path) if not hasattr(path, "protocol") else str(path)
    return text.split("://", 1)[0] if "://" in text else ""


def is_remote(path) -> bool:
    """Whether `path` names an object in an fsspec filesystem other than the local disk."""
    return protocol(path) not in LOCAL_PROTOCOLS
