"""Train-start agreement of data, tokenizer and model: the ids a dataset holds must have rows in the
model's embedding, and the dataset must have been encoded by the tokenizer the run names."""
from __future__ import annotations

import json

from trident.data.build import parse_data_paths
from trident.text.storage import location


def check_vocabulary(data_paths, tokenizer, model_vocab_size: int) -> None:
    """Raises ValueError naming the prefix when PREFIX.stats.json (written by `trident tokenize`)
    records a different tokenizer or a token id >= model_vocab_size, or when the tokenizer's own
    vocabulary does not fit the model. Datasets without stats (or older stats) are not judged here."""
    digest = tokenizer.sha256()
    for source in parse_data_paths(data_paths):
        stats_path = location(f"{source.prefix}.stats.json")
        if not stats_path.is_file():
            continue
        stats = json.loads(stats_path.read_text())
        recorded = stats.get("tokenizer_sha256")
        if recorded is not None and recorded != digest:
            raise ValueError(f"{source.prefix}: was tokenized with a different tokenizer ({stats.get('tokenizer')}, "
                             f"{stats.get('vocab_size')} tokens) than data.tokenizer={tokenizer.source}")
        max_id = stats.get("max_token_id")
        if max_id is not None and max_id >= model_vocab_size:
            raise ValueError(f"{source.prefix}: holds token id {max_id} but model.vocab_size={model_vocab_size} "
                             f"(the data was tokenized with {stats.get('tokenizer')}, "
                             f"{stats.get('vocab_size')} tokens)")
    if tokenizer.vocab_size > model_vocab_size:
        raise ValueError(f"tokenizer {tokenizer.source} has {tokenizer.vocab_size} tokens but "
                         f"model.vocab_size={model_vocab_size}: set model.vocab_size >= {tokenizer.vocab_size}")
