"""ftfy.fix_text(text, normalization=None), exactly, in a fraction of its time.

ftfy fixes a text one line (segment) at a time; each line goes through every fixer in a loop until
nothing changes, and its test for mojibake (a regular expression of ~40 alternatives) costs about
0.5 us a character. Most lines of web text need nothing, and most that do hold only a curly quote.
So: a line that no fixer can change is copied; a line that only character fixers change (no "&",
no mojibake) gets ftfy's own character fixers once, in ftfy's order, and is handed to ftfy whole
whenever the result is not plainly final; mojibake is looked for only around the characters it
can be made of. tests/test_curate_clean_ftfy.py compares with ftfy on crafted and random texts."""
from __future__ import annotations

import re
import re._parser as regex_parser

import ftfy
from ftfy import badness, chardata

_CONFIG = ftfy.TextFixerConfig(explain=False, normalization=None)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _only_where_needed(fixer, table: dict[int, object]):
    """`fixer` (ftfy's `text.translate(table)`) run only on a text holding a character of `table`:
    str.translate with a dict looks up every character (~0.1 us each); the class search is C."""
    changes = re.compile("[" + "".join(re.escape(chr(code)) for code in sorted(table)) + "]")
    return lambda text: fixer(text) if changes.search(text) else text


_TRANSLATE_TABLES = {"fix_latin_ligatures": chardata.LIGATURES, "fix_character_width": chardata.WIDTH_MAP,
                     "remove_control_chars": chardata.CONTROL_CHARS}
# ftfy's fixers that change single characters, in the order fix_and_explain applies them
_CHARACTER_FIXERS = tuple(
    _only_where_needed(ftfy.FIXERS[name], _TRANSLATE_TABLES[name]) if name in _TRANSLATE_TABLES else ftfy.FIXERS[name]
    for name in ("fix_c1_controls", "fix_latin_ligatures", "fix_character_width", "uncurl_quotes",
                 "fix_line_breaks", "fix_surrogates", "remove_terminal_escapes", "remove_control_chars"))


def _characters_a_fixer_changes() -> re.Pattern:
    """A character one of ftfy's fixers changes on its own: ASCII controls but tab and newline, "&"
    (HTML entities), C1 controls, surrogates, unusual line breaks, curly quotes, ligatures, full-
    and half-width forms, the control characters ftfy removes."""
    tables = set(chardata.LIGATURES) | set(chardata.WIDTH_MAP) | set(chardata.CONTROL_CHARS)
    listed = "".join(re.escape(chr(code)) for code in sorted(tables))
    return re.compile(rf"[\x00-\x08\x0b-\x1f&\x7f-\x9f\u2028\u2029\ud800-\udfff\u02bc\u2018-\u201f{listed}]")


def _mojibake_characters(pattern: re.Pattern) -> tuple[re.Pattern, int] | None:
    """(a class of the non-ASCII characters every match of `pattern` holds one of, the widest match)
    read from the pattern's parse: each alternative must have an element that matches non-ASCII
    characters only. None when the pattern is not of that shape (then every line is searched)."""
    tree = regex_parser.parse(pattern.pattern, pattern.flags)
    branches = tree[0][1][1] if len(tree) == 1 and tree[0][0] == regex_parser.BRANCH else [tree]
    ranges: set[tuple[int, int]] = set()
    widest = 0
    for branch in branches:
        element_sets = [_element_ranges(op, value) for op, value in branch]
        required = [spans for spans in element_sets if spans and all(low > 0x7f for low, _ in spans)]
        width = branch.getwidth()[1]
        if not required or width > 16:
            return None
        ranges.update(min(required, key=lambda spans: sum(high - low for low, high in spans)))
        widest = max(widest, width)
    listed = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in sorted(ranges))
    return re.compile(f"[{listed}]"), widest


def _element_ranges(op, value) -> list[tuple[int, int]] | None:
    """The code point ranges one element of a parsed pattern matches, or None when not a plain set."""
    if op == regex_parser.LITERAL:
        return [(value, value)]
    if op != regex_parser.IN:
        return None
    spans = []
    for item_op, item in value:
        if item_op == regex_parser.LITERAL:
            spans.append((item, item))
        elif item_op == regex_parser.RANGE:
            spans.append(item)
        else:  # a negated set or a category (\s, \w): not a plain set of characters
            return None
    return spans


_FIXER_CHANGES = _characters_a_fixer_changes()
_MOJIBAKE = _mojibake_characters(badness.BADNESS_RE)
# a segment without one of these characters does not look bad (lines of only "’", "→" or no-break
# spaces are most of the non-ASCII ones of web text)
_MAY_LOOK_BAD = _NON_ASCII if _MOJIBAKE is None else _MOJIBAKE[0]


def looks_bad(segment: str) -> bool:
    """badness.is_bad(segment), searching only windows around the characters mojibake is made of."""
    if _MOJIBAKE is None:
        return badness.BADNESS_RE.search(segment) is not None
    characters, width = _MOJIBAKE
    for found in characters.finditer(segment):
        # with pos > 0, "^" does not match at pos: the window sees the segment's start only as its own
        if badness.BADNESS_RE.search(segment, max(0, found.start() - width), found.start() + width):
            return True
    return False


def _fix_segment(segment: str, config: ftfy.TextFixerConfig) -> str:
    """ftfy.fix_and_explain(segment, config)'s text. Without "&" and mojibake, its first round is
    the character fixers alone; when their result has nothing left for any fixer, its second round
    changes nothing and that result is ftfy's."""
    if "&" not in segment and not (not segment.isascii() and looks_bad(segment)):
        fixed = segment
        for fixer in _CHARACTER_FIXERS:
            fixed = fixer(fixed)
        if _FIXER_CHANGES.search(fixed) is None and (fixed.isascii() or not looks_bad(fixed)):
            return fixed
    return ftfy.fix_and_explain(segment, config)[0]


def _segment(text: str, pos: int, limit: int) -> tuple[int, int]:
    """The segment ftfy fixes as one that holds position `pos`: its line (newline included), cut
    into pieces of `limit` characters when longer."""
    line = text.rfind("\n", 0, pos) + 1
    start = line + (pos - line) // limit * limit
    return start, min(text.find("\n", start) + 1 or len(text), start + limit)


def _segments_that_may_change(text: str, limit: int) -> list[tuple[int, int]]:
    """(start, end) of the segments ftfy might change, in order: those holding a character a fixer
    changes, and those that look like mojibake (ftfy tries encodings on nothing else)."""
    segments = set()
    found = _FIXER_CHANGES.search(text)
    while found is not None:  # every change in a segment gives that segment: the search goes on after it
        start, end = _segment(text, found.start(), limit)
        segments.add((start, end))
        found = _FIXER_CHANGES.search(text, end)
    found = _MAY_LOOK_BAD.search(text)
    while found is not None:
        start, end = _segment(text, found.start(), limit)
        if looks_bad(text[start:end]):  # the segment alone: the pattern has "^" (a segment's start)
            segments.add((start, end))
        found = _MAY_LOOK_BAD.search(text, end)
    return sorted(segments)


def fix_text(text: str) -> str:
    """Exactly ftfy.fix_text(text, normalization=None): only the lines a fixer might change are
    fixed, the rest copied; as in ftfy, HTML entities stay as they are from the first line that
    holds a "<" on."""
    config, out, copied = _CONFIG, [], 0
    first_tag = text.find("<")
    for start, end in _segments_that_may_change(text, config.max_decode_length):
        if config.unescape_html == "auto" and 0 <= first_tag < end:
            config = config._replace(unescape_html=False)
        out += [text[copied:start], _fix_segment(text[start:end], config)]
        copied = end
    return "".join(out) + text[copied:] if out else text
