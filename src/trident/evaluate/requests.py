"""Log-likelihood requests as token rows: truncation, de-duplication, length-sorted batching.

A request (context, continuation) becomes a model input row `inp = (ctx + cont)[-(L+1):][:-1]`
(lm-evaluation-harness truncation: drop from the left so the continuation always fits). The
continuation's log-probabilities are read from the last len(cont) positions of that row.

Rows are shared: requests of the same context whose input is identical, or a prefix of another
request's input, read their positions from one row (a causal model's logits at position t depend
only on tokens <= t). Rows are sorted by length, longest first (a batch that runs out of memory
does so at once), and cut into batches; since a row's logits do not depend on its batch mates
(right padding, causal attention) the scores do not depend on the batch size.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TokenRequest:
    """One (context, continuation) pair as token ids; `index` is its position in the caller's list."""

    index: int
    context: tuple[int, ...]
    continuation: tuple[int, ...]


@dataclass
class Row:
    """One model input row and the requests that read their scores from it."""

    tokens: tuple[int, ...]
    # (request index, first position read, continuation ids); positions p..p+len-1 predict the ids
    readers: list[tuple[int, int, tuple[int, ...]]] = field(default_factory=list)

    @property
    def first_read(self) -> int:
        return min(start for _, start, _ in self.readers)


def model_input(request: TokenRequest, max_length: int) -> tuple[tuple[int, ...], int]:
    """(input ids, position of the first continuation prediction) after left truncation to max_length."""
    n_cont = len(request.continuation)
    if n_cont == 0:
        raise ValueError(f"request {request.index}: empty continuation (nothing to score)")
    if n_cont > max_length:
        raise ValueError(
            f"request {request.index}: continuation of {n_cont} tokens is longer than the model's "
            f"context ({max_length}); it cannot be scored"
        )
    if not request.context:
        raise ValueError(f"request {request.index}: empty context; prepend the end-of-document token")
    full = request.context + request.continuation
    inp = full[-(max_length + 1):][:-1]
    return inp, len(inp) - n_cont


def plan_rows(requests: list[TokenRequest], max_length: int) -> list[Row]:
    """Group requests into the fewest rows (identical or prefix inputs of one context share a row).

    Rows come back sorted longest first, ties broken by the token ids, so the order is
    deterministic and independent of the order the requests arrived in.
    """
    by_context: dict[tuple[int, ...], list[tuple[tuple[int, ...], int, TokenRequest]]] = {}
    for request in requests:
        inp, start = model_input(request, max_length)
        by_context.setdefault(request.context, []).append((inp, start, request))
    rows: list[Row] = []
    for group in by_context.values():
        group.sort(key=lambda item: (-len(item[0]), item[0]))
        own_rows: list[Row] = []
        for inp, start, request in group:
            home = next((row for row in own_rows if row.tokens[: len(inp)] == inp), None)
            if home is None:
                home = Row(tokens=inp)
                own_rows.append(home)
            home.readers.append((request.index, start, request.continuation))
        rows.extend(own_rows)
    rows.sort(key=lambda row: (-len(row.tokens), row.tokens))
    return rows


def batches(rows: list[Row], batch_size: int) -> list[list[Row]]:
    """Consecutive slices of at most batch_size rows (rows already sorted longest first)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]
