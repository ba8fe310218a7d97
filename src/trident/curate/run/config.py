"""A curation pipeline's config, typed like the training config (trident.config.typed fills it).

The file is either a bare list of stages or a mapping of the keys below; each stage entry is
`stage: <registered name>` plus that stage's keyword parameters (typed by the stage's own class)
and optionally `enabled: false`. A wrong key or value raises CurateConfigError naming the key and
the file; `trident curate` exits 2 on it. The defaults below are the only ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from trident.config import ConfigError
from trident.config.typed import setting
from trident.curate.document import CurateError
from trident.text.jsonl import DEFAULT_MAX_DOC_BYTES

NAME = "pipeline config"  # how messages name the keys of this file
EXECUTORS = ("local", "ray")


class CurateConfigError(CurateError, ConfigError):
    """A pipeline config mistake (unknown key, wrong type, unknown stage or parameter)."""


@dataclass
class InputEntry:
    """An input given in the config with its own dataset name."""
    path: str = ""
    dataset: str = ""  # "": the config's dataset


def _inputs_ok(entries: list) -> bool:
    return all(isinstance(e, str) or e.path for e in entries)


@dataclass
class CurationConfig:
    # meta["dataset"] of input documents that carry none
    dataset: str = setting("a non-empty string", lambda v: v != "", default="web")
    # true: stop at the first bad input record instead of counting it
    strict: bool = setting("true or false", default=False)
    # larger records are dropped (counted as too_large)
    max_doc_bytes: int = setting("a positive int (bytes)", lambda v: v > 0, default=DEFAULT_MAX_DOC_BYTES)
    executor: str = setting("'local' or 'ray'", lambda v: v in EXECUTORS, default="local")
    # processes / Ray CPUs; 0: one per core
    workers: int = setting("an int >= 0 (0: one per core)", lambda v: v >= 0, default=1)
    # an existing Ray cluster to join ("auto", "ray://host:10001"); null: start one
    ray_address: Optional[str] = setting("null or a Ray address string", default=None)
    # input files smaller than this are read together into shards of about this many bytes (317 small
    # HTML pages make a few shards, not 317); 0: one shard per input file
    shard_bytes: int = setting("an int >= 0 (bytes; 0: one shard per input file)", lambda v: v >= 0,
                               default=32 << 20)
    # keep OUT/work/ (per-phase shards) after a successful run
    keep_work: bool = setting("true or false", default=False)
    progress: bool = setting("true or false", default=True)
    # modules imported in every worker: their @register_stage classes become stage names
    modules: list[str] = setting("a list of module names", default_factory=list)
    # paths or {path, dataset}; --input on the command line adds more
    inputs: list[Union[str, InputEntry]] = setting("a list of paths or {path, dataset} mappings", _inputs_ok,
                                                   default_factory=list)
    stages: list[dict] = setting("a list of stages ({stage: <name>, ...})", default_factory=list)

    def settings(self) -> dict:
        """Every key but the inputs, as plain data (stats.json's `config`)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "inputs"}


def check_stage_entries(config: CurationConfig) -> None:
    for index, entry in enumerate(config.stages):
        if not isinstance(entry.get("stage"), str):
            raise CurateConfigError(f"{NAME}: stages[{index}] must be a mapping with 'stage: <name>'")


def apply_stage_overrides(stages: list[dict], selected: dict) -> None:
    """`stages.<name or index>.<param>=value` overrides, parsed to {selector: {param: value}}, set on
    the one stage each selector names."""
    for selector, params in selected.items():
        if not isinstance(params, dict):
            raise CurateConfigError(f"override 'stages.{selector}': stage overrides look like "
                                    f"stages.<name or index>.<param>=value")
        if str(selector).isdigit():
            matches = [stages[int(selector)]] if int(selector) < len(stages) else []
        else:
            matches = [entry for entry in stages if entry["stage"] == selector]
        if len(matches) != 1:
            names = [entry["stage"] for entry in stages]
            raise CurateConfigError(f"override 'stages.{selector}': '{selector}' must name exactly one stage of "
                                    f"{names} (or use its index)")
        matches[0].update(params)
