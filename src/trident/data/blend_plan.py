"""Blending plan: from per-source token counts and wanted weights or epochs, the `data.paths`
section of a training config (Megatron's [weight, prefix] pairs), as MT-NLG's 15-source table.

For a training run of T tokens, a source of N tokens sampled with weight w is seen w*T/N times
(epochs). Give each source either `weight` or `epochs`; the other is derived, and weights are
normalised to sum to 1 (the training sampler does the same).

Sources file (YAML):
    train_tokens: 270e9
    sources:
      - {name: OpenWebText2, prefix: data/owt2_text_document, tokens: 14.8e9, weight: 0.193}
      - {name: Wikipedia, prefix: data/wiki_text_document, epochs: 3.1}   # tokens read from .idx
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class BlendPlanError(ValueError):
    """A blend sources file or plan that cannot be used; the message names the source or key."""


def _tokens(source: dict) -> float:
    if "tokens" in source:
        return float(source["tokens"])
    from trident.data.indexed import IndexedDataset

    try:
        return float(IndexedDataset(source["prefix"]).num_tokens)
    except (OSError, ValueError) as err:
        raise BlendPlanError(f"blend source {source.get('name')!r}: no 'tokens' given and the indexed dataset "
                          f"'{source['prefix']}' cannot be read ({err})") from err


def plan_blend(sources: list[dict], train_tokens: float) -> list[dict]:
    """Per source: name, prefix, tokens, weight (normalised), epochs; in the given order."""
    if train_tokens <= 0:
        raise BlendPlanError(f"train_tokens must be > 0, got {train_tokens}")
    rows = []
    for index, source in enumerate(sources):
        name = source.get("name", f"sources[{index}]")
        if "prefix" not in source:
            raise BlendPlanError(f"blend source {name!r}: missing 'prefix' (the PREFIX of PREFIX.bin/.idx)")
        if ("weight" in source) == ("epochs" in source):
            raise BlendPlanError(f"blend source {name!r}: give exactly one of 'weight' or 'epochs'")
        tokens = _tokens(source)
        if tokens <= 0:
            raise BlendPlanError(f"blend source {name!r}: tokens must be > 0, got {tokens}")
        weight = float(source["weight"]) if "weight" in source else float(source["epochs"]) * tokens / train_tokens
        if weight < 0:
            raise BlendPlanError(f"blend source {name!r}: weight/epochs must be >= 0")
        rows.append({"name": name, "prefix": str(source["prefix"]), "tokens": tokens, "weight": weight})
    total = sum(r["weight"] for r in rows)
    if total <= 0:
        raise BlendPlanError("blend: all weights are 0")
    for row in rows:
        row["weight"] = row["weight"] / total
        row["epochs"] = row["weight"] * train_tokens / row["tokens"]
    return rows


def data_section(rows: list[dict], digits: int = 4) -> dict[str, Any]:
    """{"data": {"paths": [[weight, prefix], ...]}} for a trident training config."""
    return {"data": {"paths": [[round(r["weight"], digits), r["prefix"]] for r in rows]}}


def load_sources(path: Path | str) -> tuple[list[dict], float]:
    """(sources, train_tokens) from a sources YAML file (format in the module docstring)."""
    try:
        tree = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise BlendPlanError(f"blend sources '{path}': {err}") from err
    if not isinstance(tree, dict) or not isinstance(tree.get("sources"), list) or "train_tokens" not in tree:
        raise BlendPlanError(f"blend sources '{path}': needs 'train_tokens' and a 'sources' list")
    return tree["sources"], float(tree["train_tokens"])
