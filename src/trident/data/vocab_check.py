"""Train-start agreement of data, tokenizer and model: the ids a dataset holds must have rows in the
model's embedding, and the dataset must have been encoded by the model's own tokenizer."""
from __future__ import annotations

import json

from trident.data.build import parse_data_paths
from trident.text.storage import location


def check_vocabulary(data_paths, tokenizer, model_vocab_size: int) -> list[str]:
    """Raises ValueError naming the prefix when PREFIX.stats.json (written by `trident tokenize`)
    records another tokenizer than `tokenizer` (the model's; by fingerprint, or by the whole file's
    digest for datasets made before fingerprints) or a token id >= model_vocab_size, or when the
    tokenizer's own vocabulary does not fit the model. Returns warnings for datasets that record no
    tokenizer (they are trained on, unjudged)."""
    warnings = []
    for source in parse_data_paths(data_paths):
        stats_path = location(f"{source.prefix}.stats.json")
        stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
        if not _same_tokenizer(stats, tokenizer, source.prefix, warnings):
            raise ValueError(f"{source.prefix}: was tokenized with another tokenizer than the model's: "
                             f"{stats.get('tokenizer')} (fingerprint {_recorded(stats)}, {stats.get('vocab_size')} "
                             f"tokens) against the model's {tokenizer.source} (fingerprint {tokenizer.fingerprint()[:16]}, "
                             f"{tokenizer.vocab_size} tokens); tokenize the data again with "
                             f"`trident tokenize --tokenizer {tokenizer.source}`")
        max_id = stats.get("max_token_id")
        if max_id is not None and max_id >= model_vocab_size:
            raise ValueError(f"{source.prefix}: holds token id {max_id} but model.vocab_size={model_vocab_size} "
                             f"(the data was tokenized with {stats.get('tokenizer')}, "
                             f"{stats.get('vocab_size')} tokens)")
    if tokenizer.vocab_size > model_vocab_size:
        raise ValueError(f"tokenizer {tokenizer.source} has {tokenizer.vocab_size} tokens but "
                         f"model.vocab_size={model_vocab_size}: set model.vocab_size >= {tokenizer.vocab_size}")
    return warnings


def _recorded(stats: dict) -> str:
    return (stats.get("tokenizer_fingerprint") or f"sha256 {stats.get('tokenizer_sha256')}")[:16]


def _same_tokenizer(stats: dict, tokenizer, prefix: str, warnings: list[str]) -> bool:
    if "tokenizer_fingerprint" in stats:
        return stats["tokenizer_fingerprint"] == tokenizer.fingerprint()
    if "tokenizer_sha256" in stats:  # made before fingerprints: the whole tokenizer.json's digest
        return stats["tokenizer_sha256"] == tokenizer.sha256()
    warnings.append(f"{prefix}: records no tokenizer (no {prefix}.stats.json from `trident tokenize`, or an older "
                    f"one): it cannot be checked against the model's tokenizer {tokenizer.source}")
    return True
