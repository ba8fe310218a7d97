"""Token ids must have an embedding row: checked in every layout (TP > 1 would embed them as zeros)."""
from __future__ import annotations


class TokenOutOfRange(ValueError):
    """A token id with no embedding row."""


def check_token_ids(tokens, num_embeddings: int) -> None:
    """Raise TokenOutOfRange unless every id of `tokens` (a tensor or numpy array) is in [0, num_embeddings)."""
    if len(tokens.reshape(-1)) == 0:
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= num_embeddings:
        raise TokenOutOfRange(f"token id {low if low < 0 else high} outside the vocabulary [0, "
                              f"{num_embeddings}): the data was tokenized for a bigger vocabulary")
