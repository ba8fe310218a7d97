"""Exact substring look-ups in one fixed text in time about proportional to the needle, not the text.

The list post-pass asks thousands of times whether a list item's or a paragraph's text is in the
extracted text; `needle in text` scans the text each time, so a page with thousands of items cost
time quadratic in its size (a 600 KB page: tens of seconds). Here every 4-character and
16-character window of the text is hashed once (numpy, a few ms for 500k characters) and sorted; a
needle is looked up by the places of the rarest of three of its windows, all checked in one
vectorised compare. A needle shorter than 4 characters is searched for directly, and so are all
needles of a text under _INDEXED_CHARS (bounded work each) and the first _PLAIN_SCANS needles of a
longer one: most pages ask a few questions, for which building the index costs
more than scanning, and the index bounds what the many questions of a large page cost.
"""
from __future__ import annotations

import numpy as np

_WINDOWS = (16, 4)  # window lengths: a needle uses the longest that fits it
_PLAIN_SCANS = 64  # searches done plainly first (each scans the text): a small page never builds the index
_INDEXED_CHARS = 1 << 16  # a shorter text is always scanned: a scan of it costs about what a look-up does
_COMPARE_LIMIT = 1 << 20  # code points compared in one vectorised step at most
_MULT_INT, _MASK = 0x100000001B3, (1 << 64) - 1  # FNV prime: the polynomial hash's base; uint64 wraps
_MULT = np.uint64(_MULT_INT)


def _codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)


def _window_hashes(codes: np.ndarray, width: int) -> np.ndarray:
    """The hash of every window of `width` code points (one vector pass per position in the window)."""
    count = len(codes) - width + 1
    hashes = np.zeros(max(count, 0), dtype=np.uint64)
    if count <= 0:
        return hashes
    for offset in range(width):
        hashes *= _MULT
        hashes += codes[offset:offset + count]
    return hashes


def _hash(text: str, offset: int, width: int) -> int:
    """``_window_hashes`` of the one window text[offset:offset + width], in Python integers."""
    value = 0
    for char in text[offset:offset + width]:
        value = (value * _MULT_INT + ord(char)) & _MASK
    return value


class TextIndex:
    """``find(needle)`` == ``text.find(needle)`` and ``needle in index`` == ``needle in text``.
    ``lines``: where ``text`` is a text without its white space (of_lines), that text's lines."""

    def __init__(self, text: str, lines: list[str] | None = None) -> None:
        self.text = text
        self._scans = 0  # plain searches so far: the index is built when they would cost more
        self._codes, self._tables = None, {}
        self._lines, self._pieces = lines, frozenset()

    @classmethod
    def of_lines(cls, text: str) -> "TextIndex":
        """The index of ``text`` without white space, whose lines answer most look-ups (below)."""
        lines = text.split("\n")
        return cls("".join(text.split()), lines)

    def _build(self) -> None:
        self._codes = _codes(self.text)
        for width in _WINDOWS:
            hashes = _window_hashes(self._codes, width)
            order = np.argsort(hashes)  # a needle's candidate places are sorted again when looked up
            self._tables[width] = (hashes[order], order)
        # ``in`` asks mostly for a whole line of the text (a paragraph, a list item kept with its bullet):
        # each line without white space, and without its first character, is a substring, found in a set
        keys = ["".join(line.split()) for line in self._lines or ()]
        self._pieces = frozenset(keys) | frozenset(key[1:] for key in keys)

    def __contains__(self, needle: str) -> bool:
        return needle in self._pieces or self.find(needle) >= 0

    def find(self, needle: str) -> int:
        """The first offset of `needle` in the text, -1 when it is not there."""
        width = _WINDOWS[0] if len(needle) >= _WINDOWS[0] else _WINDOWS[1] if len(needle) >= _WINDOWS[1] else None
        if width is None or len(self.text) < max(len(needle), _INDEXED_CHARS) or self._scans < _PLAIN_SCANS:
            self._scans += width is not None
            return self.text.find(needle)
        if self._codes is None:
            self._build()
        sorted_hashes, positions = self._tables[width]
        offsets = sorted({0, (len(needle) - width) // 2, len(needle) - width})  # three windows of the needle
        hashes = np.array([_hash(needle, offset, width) for offset in offsets], dtype=np.uint64)
        low = np.searchsorted(sorted_hashes, hashes, "left")
        counts = np.searchsorted(sorted_hashes, hashes, "right") - low
        rarest = int(np.argmin(counts))
        if counts[rarest] == 0:
            return -1
        wanted = _codes(needle)
        starts = np.sort(positions[low[rarest]:low[rarest] + counts[rarest]]) - offsets[rarest]
        starts = starts[(starts >= 0) & (starts + len(wanted) <= len(self._codes))]
        if len(starts) * len(wanted) > _COMPARE_LIMIT:  # a long needle at many places: one at a time
            return next((int(start) for start in starts if self.text.startswith(needle, int(start))), -1)
        if not len(starts):
            return -1
        matches = (self._codes[starts[:, None] + np.arange(len(wanted))] == wanted).all(axis=1)
        hits = np.flatnonzero(matches)
        return int(starts[hits[0]]) if len(hits) else -1
