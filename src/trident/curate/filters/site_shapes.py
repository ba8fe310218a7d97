"""Template lines by shape: navigation lines whose words are constant except for a title.

Documentation sites open and close most pages with a line such as ``Prev Up <chapter title> Home
Next`` or ``Next: <title>, Previous: <title>, Up: <title> [Index]``: the same words on every page
around a span that changes, so no two pages share the line exactly. Such a line is found by its
*shape*: its words with every run of words that are not the site's *anchors* replaced by one
wildcard (``prev up * home next``).

Only a page's edge lines are looked at: its first and last ``SLOTS`` non-blank lines, each a slot
(top 0, 1, 2, bottom 0, 1, 2). A word is an anchor of a host at a slot when
  - it stands in that slot on at least ``min_docs`` and ``min_fraction`` of the host's pages,
  - on at least ``ANCHOR_SHARE`` of as many pages as the slot's most common anchor (a template's
    constant words come together; the words of the titles between them are each rarer), and
  - on ``BODY_RATIO`` times more pages there than in the pages' bodies (a sample of inner lines):
    "the", or a product name the site repeats everywhere, is no anchor.
A shape is *template* at a slot when it has a wildcard and an alphabetic anchor and stands in that
slot on at least ``min_docs`` and ``min_fraction`` of the host's pages; a line of more than
``MAX_WORDS`` words, or one that ends as a sentence does, is prose and never template by shape
("Changed in version 3.6: Added the errors parameter."). A template-shaped line with
``STRONG_LETTERS`` alphabetic anchors or more is removed where it stands (it is in a page's first or last
lines by construction: a navigation line under the page title); one with fewer only when it is the
page's first or last line, with the run of template lines next to it (site_lines.template_region):
a "Source code: <path>" line under a module's title, or a title "5.13 <words> Functions" under a
navigation line, stays. The contiguous parts of a template shape with a wildcard and two
alphabetic anchors are template too, at the same slot (a chapter's last page has no "Next: *").
"""
from __future__ import annotations

import re
import struct
from collections import Counter
from functools import lru_cache

import numpy as np
import xxhash

SLOTS = 3  # edge lines looked at on each end of a page
MAX_WORDS = 24  # a longer line is prose, never navigation
BODY_LINES = 6  # inner lines a page contributes to the body sample
BODY_RATIO = 4  # an anchor is this many times more frequent in its slot than in the bodies
ANCHOR_SHARE = 0.6  # ... and on this share of the pages of the slot's most common anchor
STRONG_LETTERS = 3  # alphabetic anchors for a shape to be removed wherever it stands in the edge lines
WEAK, STRONG = 3, 2  # site_lines.template_region's flags of a line of template shape
WILD = 0  # a run of non-anchor words in a shape
_DIGITS = re.compile(r"\d+")
_ASCII_DIGIT_BYTES_TO_ZERO, _ZERO_RUN_BYTES = bytes.maketrans(b"123456789", b"0" * 9), re.compile(b"00+")
_ASCII_BYTES = bytes(range(128))
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*$")
EDGES = [("host", "u8"), ("page", "u8"), ("slot", "u1"), ("at", "u1"), ("word", "u8"), ("alpha", "u1")]
BODY = [("host", "u8"), ("word", "u8"), ("pages", "u4")]


def fold(text: str) -> str:
    """Text as compared across pages: case-folded, each run of digits as 0 (line breaks kept)."""
    folded = text.casefold()
    data = folded.encode("utf-8")
    if _DIGITS.search(data.translate(None, _ASCII_BYTES).decode("utf-8")) is None:
        # its digits are 0-9 (its non-ASCII characters hold none): on its UTF-8 bytes each made 0 in one C
        # pass, then runs of 0 made one; 4-5x faster than the pattern over every character
        return _ZERO_RUN_BYTES.sub(b"0", data.translate(_ASCII_DIGIT_BYTES_TO_ZERO)).decode("utf-8")
    return _DIGITS.sub("0", folded)


def words(line: str) -> list[str]:
    """A line's words as compared across pages (fold)."""
    return fold(line).split()


def candidate(line_words: list[str]) -> bool:
    """Whether a line may be navigation: at most MAX_WORDS words, not ending as a sentence does."""
    return 0 < len(line_words) <= MAX_WORDS and not _SENTENCE_END.search(line_words[-1])


def word_key(word: str) -> int:
    return xxhash.xxh3_64_intdigest(word.encode("utf-8"))


def has_letter(word: str) -> bool:
    return any(c.isalpha() for c in word)


def slots(n: int) -> list[tuple[int, int]]:
    """(slot, line index) of the edge lines of a page of ``n`` non-blank lines: top slots 0..SLOTS-1,
    bottom slots SLOTS.. (a line of a short page may hold a top and a bottom slot)."""
    top = [(i, i) for i in range(min(SLOTS, n))]
    return top + [(SLOTS + j, n - 1 - j) for j in range(min(SLOTS, n))]


def body_lines(n: int) -> list[int]:
    """Indexes of the inner lines (no slot) a page contributes to the body sample, spread evenly."""
    inner = range(SLOTS, n - SLOTS)
    step = max(1, len(inner) // BODY_LINES)
    return list(inner[::step][:BODY_LINES])


def page_records(host: int, page: int, folded: list[str]) -> tuple[list[tuple], set[int]]:
    """(EDGES rows of the page's edge lines, keys of the words of its body sample), given its
    non-blank lines folded (fold)."""
    edges = []
    for slot, index in slots(len(folded)):
        line_words = folded[index].split()
        if candidate(line_words):
            edges += [(host, page, slot, at, word_key(w), has_letter(w)) for at, w in enumerate(line_words)]
    body = set(map(word_key, {w for index in body_lines(len(folded)) for w in folded[index].split()}))
    return edges, body


@lru_cache(maxsize=1 << 16)
def anchor_key(slot: int, word: int) -> int:
    """A host's template-set key of an anchor word at a slot (remembered: a site's edge lines repeat
    their words, 16,896 look-ups on 766 pages)."""
    return xxhash.xxh3_64_intdigest(struct.pack("<BQ", slot, word) + b"anchor")


def shape_key(slot: int, shape: int) -> int:
    """A host's template-set key of a template shape at a slot."""
    return xxhash.xxh3_64_intdigest(struct.pack("<BQ", slot, shape) + b"shape")


def line_shape(slot: int, keys: list[int], alpha: list[bool], is_anchor) -> list[tuple[int, bool]]:
    """A line's shape at ``slot``: (anchor word key, has a letter) per anchor, (WILD, False) per run
    of other words; ``is_anchor(slot, key)`` says which words are anchors."""
    shape: list[tuple[int, bool]] = []
    for key, has_letter in zip(keys, alpha):
        if is_anchor(slot, key):
            shape.append((key, bool(has_letter)))
        elif not shape or shape[-1][0] != WILD:
            shape.append((WILD, False))
    return shape


def shape_hash(shape: list[tuple[int, bool]]) -> int:
    return xxhash.xxh3_64_intdigest(np.array([key for key, _ in shape], dtype=np.uint64).tobytes())


def letters(shape: list[tuple[int, bool]]) -> int:
    """Alphabetic anchors of a shape."""
    return sum(has_letter for _, has_letter in shape)


def may_be_template(shape: list[tuple[int, bool]]) -> bool:
    """A shape with a wildcard and an alphabetic anchor (an exact line, or a title alone, is not)."""
    return letters(shape) > 0 and any(key == WILD for key, _ in shape)


def parts(shape: list[tuple[int, bool]]) -> list[list[tuple[int, bool]]]:
    """The contiguous parts of a template shape that are template too: those with a wildcard and
    two alphabetic anchors (``previous: * up: * [index]`` on the last page of a chapter, which
    has no ``next: *``)."""
    n = len(shape)
    return [shape[i:j] for i in range(n) for j in range(i + 1, n + 1)
            if (i, j) != (0, n) and letters(shape[i:j]) >= 2 and may_be_template(shape[i:j])]


def shape_flags(lines: list[str], template: set[int]) -> dict[int, int]:
    """{line index: WEAK or STRONG} for the lines of a page's non-blank ``lines`` whose shape is
    template, given its host's template set (anchor and shape keys)."""
    flags: dict[int, int] = {}
    for slot, index in slots(len(lines)):
        line_words = words(lines[index])
        if not candidate(line_words):
            continue
        shape = line_shape(slot, [word_key(w) for w in line_words], [has_letter(w) for w in line_words],
                           lambda s, k: anchor_key(s, k) in template)
        strong = letters(shape) >= STRONG_LETTERS
        # a weak shape only as the page's first or last line: under a navigation line may stand a title
        # whose one frequent word makes a shape ("5.13 * Functions")
        if (strong or slot in (0, SLOTS)) and may_be_template(shape) and shape_key(slot, shape_hash(shape)) in template:
            flags[index] = STRONG if strong or flags.get(index) == STRONG else WEAK
    return flags


def find_anchors(slot_words: tuple[list[np.ndarray], np.ndarray], body: np.ndarray, host_pages: dict[int, int],
                 min_docs: int, min_fraction: float) -> set[tuple[int, int, int]]:
    """(host, slot, word) of every anchor (module docstring), given the distinct pages of each
    (host, slot, word) of the edge lines and the BODY counts."""
    (host, slot, word), pages = slot_words
    in_body: Counter = Counter()
    for h, w, n in zip(body["host"].tolist(), body["word"].tolist(), body["pages"].tolist()):
        in_body[h, w] += n
    candidates: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for h, s, w, n in zip(host.tolist(), slot.tolist(), word.tolist(), pages.tolist()):
        of_host = host_pages.get(h)
        if of_host and n >= min_docs and n >= min_fraction * of_host and n >= BODY_RATIO * in_body[h, w]:
            candidates.setdefault((h, s), []).append((w, n))
    anchors = set()
    for (h, s), found in candidates.items():
        most = max(n for _, n in found)
        anchors.update((h, s, w) for w, n in found if n >= ANCHOR_SHARE * most)
    return anchors


def find_shapes(edges: np.ndarray, anchors: set[tuple[int, int, int]], host_pages: dict[int, int],
                min_docs: int, min_fraction: float) -> list[tuple[int, int]]:
    """(host, shape_key) of every template shape (module docstring) of the hosts in ``edges``."""
    if not anchors:
        return []
    rows = np.unique(edges)  # a page's copies under other URLs count once
    rows = rows[np.lexsort((rows["at"], rows["slot"], rows["page"], rows["host"]))]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (rows["host"][1:] != rows["host"][:-1]) | (rows["page"][1:] != rows["page"][:-1]) | (
        rows["slot"][1:] != rows["slot"][:-1])
    starts = np.flatnonzero(new).tolist() + [len(rows)]
    hosts, pages, slot_of = rows["host"].tolist(), rows["page"].tolist(), rows["slot"].tolist()
    words_of, alpha_of = rows["word"].tolist(), rows["alpha"].tolist()
    shapes: dict[tuple[int, int, int], set[int]] = {}
    examples: dict[tuple[int, int, int], list] = {}
    for a, b in zip(starts, starts[1:]):
        host = hosts[a]
        shape = line_shape(slot_of[a], words_of[a:b], alpha_of[a:b], lambda s, k: (host, s, k) in anchors)
        if may_be_template(shape):
            at = (host, slot_of[a], shape_hash(shape))
            shapes.setdefault(at, set()).add(pages[a])
            examples[at] = shape
    keys = set()
    for (h, s, shape), on in shapes.items():
        if len(on) >= min_docs and len(on) >= min_fraction * host_pages[h]:
            keys.add((h, shape_key(s, shape)))
            keys.update((h, shape_key(s, shape_hash(part))) for part in parts(examples[h, s, shape]))
    return sorted(keys)
