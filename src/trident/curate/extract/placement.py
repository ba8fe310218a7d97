"""Where the list post-pass puts rescued lists and tables back in the extracted text, all in one pass.

A block goes after the extracted line that holds the end of its previous neighbour's text, or
before the line that holds the start of its next neighbour's, or next to a neighbour that was itself
put back, or at the end. The places are found in the text without white space (its `TextIndex`)
and mapped to lines by a binary search over the lines' cumulative lengths; the text is written
once at the end (inserting each block into the text as it was found cost a pass over the whole
text per block: quadratic on a page with hundreds of rescued lists).
"""
from __future__ import annotations

import bisect
from itertools import accumulate

from trident.curate.extract.text_index import TextIndex

_BEFORE, _AFTER, _END = "before", "after", "end"


def squeeze(text: str) -> str:
    """Text without white space: backends lay lines out differently, characters stay the same."""
    return "".join(text.split())


class Placement:
    """The blocks chosen so far, each in a slot: before or after a line of the text, or at its end."""

    def __init__(self, text: str, index: TextIndex, paragraph_break: str) -> None:
        self.text, self.index, self.paragraph_break = text, index, paragraph_break
        self.lines = text.split("\n")
        self._ends = list(accumulate(len(squeeze(line)) for line in self.lines))  # key chars up to each line
        self._slots: dict[tuple, list] = {}  # (line, before/after) or (None, end) -> [(node, block)]
        self._where: dict = {}  # a rescued node -> its slot

    def rescued(self, node) -> bool:
        return node in self._where

    def text_slot(self, key: str, after: bool) -> tuple | None:
        """The slot after the line holding the end of `key` (or before the one holding its start)."""
        offset = self.index.find(key)
        if offset < 0:
            return None
        target = offset + len(key) if after else offset + 1
        line = min(bisect.bisect_left(self._ends, target), len(self.lines) - 1)
        return line, _AFTER if after else _BEFORE

    def add(self, node, block: str, slot: tuple | None, neighbour=None, after: bool = True) -> None:
        """Put `block` (the text of `node`) in `slot`, or next to the rescued `neighbour` (after it or
        before it, in its slot), or at the end when neither is given."""
        if neighbour is not None:
            slot = self._where[neighbour]
            blocks = self._slots[slot]
            at = next(i for i, (held, _) in enumerate(blocks) if held == neighbour) + (1 if after else 0)
            blocks.insert(at, (node, block))
        else:
            slot = slot or (None, _END)
            self._slots.setdefault(slot, []).append((node, block))
        self._where[node] = slot

    def result(self) -> str:
        """The text with every block in its slot."""
        if not self._slots:
            return self.text
        pb, lines = self.paragraph_break, list(self.lines)
        for number in {number for number, _ in self._slots if number is not None}:  # only the lines with a slot
            before = [block + pb for _, block in self._slots.get((number, _BEFORE), ())]
            after = [pb + block for _, block in self._slots.get((number, _AFTER), ())]
            lines[number] = "".join([*before, lines[number], *after])
        text = "\n".join(lines)
        end = self._slots.get((None, _END))
        return text.rstrip() + "".join(pb + block for _, block in end) if end else text
