"""Rejected layouts counted by kind of reason: messages that differ only in their numbers count as one
kind, and the range of each number across them is kept, so that a table prints the figures
("needs 80.1-1520.4 GiB per GPU (stage 0-34)") rather than placeholders."""
from __future__ import annotations

import re
from collections import Counter

NUMBER = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?(?![\w.])")  # not inside names such as a100-80gb


def reason_kind(reason: str) -> str:
    """The message with each number as N (the key its count is kept under)."""
    return NUMBER.sub("N", reason)


class Rejections(Counter):
    """kind -> count (a Counter), plus each kind's first message and every number's (lowest, highest) span."""

    def __init__(self):
        super().__init__()
        self.examples: dict[str, str] = {}
        self.spans: dict[str, list[tuple[str, str]]] = {}

    def add(self, reason: str, count: int = 1) -> None:
        kind = reason_kind(reason)
        self[kind] += count
        numbers = NUMBER.findall(reason)
        if kind not in self.spans:
            self.examples[kind], self.spans[kind] = reason, [(n, n) for n in numbers]
            return
        self.spans[kind] = [(low, high) if low == n == high else (min(low, n, key=float), max(high, n, key=float))
                             for (low, high), n in zip(self.spans[kind], numbers)]

    def described(self, kind: str) -> str:
        """The kind with its numbers: one value where all its messages agree, else lowest-highest."""
        if kind not in self.examples:
            return kind
        spans = iter(self.spans[kind])
        return NUMBER.sub(lambda match: "-".join(dict.fromkeys(next(spans))), self.examples[kind])
