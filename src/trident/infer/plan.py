"""One forward pass of batched generation, as tensors every rank can receive: which slots, which
tokens at which absolute positions, and each row's sampling options; and what comes back.

A plan crosses ranks as one header ([kind, rows, width]) and two tensors (longs, floats), so a
driver rank can send it to followers with three broadcasts and no pickling.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TOP_LOGPROBS = 20  # as the OpenAI chat API caps `top_logprobs` (completions' `logprobs` stops at 5)
LONG_COLUMNS = ("slot", "last", "echo", "top_n", "top_k", "seed", "fresh")


@dataclass
class RowSpec:
    """One sequence's share of a forward pass."""
    slot: int
    tokens: list[int]  # the tokens fed this pass (a whole prompt, or the one newest token)
    start: int  # absolute position of tokens[0]
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    fresh: bool = False  # first pass of this sequence: (re)seed its sampling generator
    echo: bool = False  # also score every fed token (prompt log-probabilities)
    top_n: int = 0  # alternatives reported per token
    bias: tuple[tuple[int, float], ...] = ()  # (token id, value) added to the logits before choosing


@dataclass
class Plan:
    longs: torch.Tensor  # [b, len(LONG_COLUMNS) + 2 w]: the columns, then tokens, then positions
    floats: torch.Tensor  # [b, 2 + 2 k]: temperature, top_p, then k bias ids and k bias values (0-padded)

    @property
    def rows(self) -> int:
        return self.longs.shape[0]

    @property
    def width(self) -> int:
        return (self.longs.shape[1] - len(LONG_COLUMNS)) // 2

    def column(self, name: str) -> torch.Tensor:
        return self.longs[:, LONG_COLUMNS.index(name)]

    @property
    def tokens(self) -> torch.Tensor:
        return self.longs[:, len(LONG_COLUMNS): len(LONG_COLUMNS) + self.width]

    @property
    def positions(self) -> torch.Tensor:
        return self.longs[:, len(LONG_COLUMNS) + self.width:]

    def __post_init__(self):
        self.any_echo = bool(self.column("echo").any())
        self.top_n = int(self.column("top_n").max())
        self.any_sampled = bool((self.floats[:, 0] > 0).any())
        self.bias_width = (self.floats.shape[1] - 2) // 2
        self.any_bias = self.bias_width > 0

    @property
    def bias_ids(self) -> torch.Tensor:
        return self.floats[:, 2: 2 + self.bias_width].long()

    @property
    def bias_values(self) -> torch.Tensor:
        return self.floats[:, 2 + self.bias_width:]

    @property
    def out_width(self) -> int:
        """Positions reported per row: all of them when a row echoes, else only each row's last."""
        return self.width if self.any_echo else 1

    def header(self) -> torch.Tensor:
        return torch.tensor([0, self.rows, self.width, self.bias_width], dtype=torch.long)


def build_plan(rows: list[RowSpec], seq_length: int, pad_id: int, multiple: int = 1) -> Plan:
    """Right-padded rows (width rounded up to `multiple`, for sequence parallelism). A padding
    token takes the positions after its row's last (capped at seq_length - 1)."""
    if not rows:
        raise ValueError("a plan needs at least one row")
    width = max(len(r.tokens) for r in rows)
    width = -(-width // multiple) * multiple
    bias_width = max(len(r.bias) for r in rows)
    longs, floats = [], []
    for row in rows:
        if not row.tokens or row.start + len(row.tokens) > seq_length:
            raise ValueError(f"row for slot {row.slot}: {len(row.tokens)} tokens from position {row.start} "
                             f"do not fit model.seq_length={seq_length}")
        columns = [row.slot, len(row.tokens) - 1, int(row.echo), row.top_n, row.top_k, row.seed, int(row.fresh)]
        tokens = row.tokens + [pad_id] * (width - len(row.tokens))
        positions = [min(p, seq_length - 1) for p in range(row.start, row.start + width)]
        longs.append(columns + tokens + positions)
        pad = [0] * (bias_width - len(row.bias))  # id 0 + 0.0 changes nothing
        floats.append([row.temperature, row.top_p, *(t for t, _ in row.bias), *pad, *(v for _, v in row.bias), *pad])
    longs, floats = torch.tensor(longs, dtype=torch.long), torch.tensor(floats, dtype=torch.float64)
    return Plan(longs, floats)


@dataclass
class StepOutput:
    """Per row and reported position: the chosen (or next prompt) token, its log-probability, and
    the top_n alternatives. At a row's last position the token is the newly generated one."""
    table: torch.Tensor  # [b, out_width, 2 + 2 top_n] float64: id, logprob, top ids, top logprobs
    lasts: list[int]  # each row's last position in the table

    def __post_init__(self):
        self.values = self.table.tolist()  # read per row and token: Python lists, not tensor indexing
        self.width = (self.table.shape[2] - 2) // 2

    def token(self, row: int, position: int | None = None) -> int:
        return int(self.values[row][self.lasts[row] if position is None else position][0])

    def logprob(self, row: int, position: int | None = None) -> float:
        return self.values[row][self.lasts[row] if position is None else position][1]

    def top(self, row: int, n: int, position: int | None = None) -> list[tuple[int, float]]:
        entry = self.values[row][self.lasts[row] if position is None else position]
        return [(int(i), lp) for i, lp in zip(entry[2: 2 + n], entry[2 + self.width: 2 + self.width + n])]
