"""Types of a curation pipeline config's top-level keys, checked like the training config's.

A wrong value raises CurateConfigError naming the key and what it must be; `trident curate` exits 2.
"""
from __future__ import annotations

from typing import Any, Callable

from trident.config import ConfigError
from trident.curate.document import CurateError


class CurateConfigError(CurateError, ConfigError):
    """A pipeline config mistake (unknown key, wrong type, unknown stage or parameter)."""


def _input_entry(entry: Any) -> bool:
    if isinstance(entry, str):
        return True
    return (isinstance(entry, dict) and isinstance(entry.get("path"), str) and set(entry) <= {"path", "dataset"}
            and isinstance(entry.get("dataset", ""), str))


# key -> (accepts the value, what the key must be)
SETTINGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "dataset": (lambda v: type(v) is str and v != "", "a non-empty string"),
    "strict": (lambda v: type(v) is bool, "true or false"),
    "max_doc_bytes": (lambda v: type(v) is int and v > 0, "a positive int (bytes)"),
    "executor": (lambda v: v in ("local", "ray"), "'local' or 'ray'"),
    "workers": (lambda v: type(v) is int and v >= 0, "an int >= 0 (0: one per core)"),
    "ray_address": (lambda v: v is None or type(v) is str, "null or a Ray address string"),
    "keep_work": (lambda v: type(v) is bool, "true or false"),
    "progress": (lambda v: type(v) is bool, "true or false"),
    "inputs": (lambda v: type(v) is list and all(map(_input_entry, v)),
               "a list of paths or {path, dataset} mappings"),
    "stages": (lambda v: type(v) is list, "a list of stages ({stage: <name>, ...})"),
    "modules": (lambda v: type(v) is list and all(type(m) is str for m in v), "a list of module names"),
}


def check_settings(config: dict) -> None:
    """Raise CurateConfigError for the first top-level key whose value has the wrong type or range."""
    for key, (accepts, what) in SETTINGS.items():
        if key in config and not accepts(config[key]):
            raise CurateConfigError(f"pipeline config key '{key}': expected {what}, got {config[key]!r}")
