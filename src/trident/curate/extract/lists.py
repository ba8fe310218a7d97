"""Post-pass of the `extract` stage: puts back the text-bearing lists and tables of the article that
a main-content extractor dropped, leaving navigation out.

Both backends lose lists on documentation pages: resiliparse drops every <ul> fewer than three
levels below <body> and link-dense ones anywhere; trafilatura drops lists whose text is mostly link
text, and every table unless asked for them. The post-pass looks at each outermost <ul>, <ol>, <dl>
(and <table> that does not lay out the page) whose text is missing from the extracted text, and
puts it back when
  * it carries prose: no links at all; or at most half of its words are link text with at least
    four words per item (links with descriptions, API items); or link items of at least seven
    words on average that are sentences, not Title Case headlines (descriptive links). Tables:
    at most half link text and a cell of six or more words;
  * it is not navigation: no <nav>/<header>/<footer>/<aside> ancestor; neither it, nor most
    of its items, nor an ancestor up to the article (<main>, <article>) has an ARIA role or a
    class/id of a menu, breadcrumb, sidebar, table of contents, footer, related links, share bar,
    comments, pagination, ad or pop-up, or is hidden; not repeated on the page;
  * it sits in the article: next to an element whose text was extracted, or inside the deepest
    element that holds 80% of the extracted paragraphs.
The text goes back after the extracted line that precedes it on the page (or before the one that
follows it), one line per item or table row.

Speed: every DOM node handed to Python costs ~5-10 us (resiliparse wraps each one), as much as
parsing a small page. So the lists are read from their HTML with regular expressions, and a screen
on the raw page (each list's markup up to the first closing tag of its kind) runs the DOM pass only when
some list could qualify: most pages' lists are menus or already in the text.
"""
from __future__ import annotations

import html as html_lib
import re
from collections import Counter
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from resiliparse.parse.html import HTMLTree

_OPEN = re.compile(r"<(ul|ol|dl|table)\b([^>]*)>", re.I)
# The screen skips the landmarks whole (they do not nest in themselves, so the first close ends them).
_OPEN_OR_LANDMARK = re.compile(r"<(ul|ol|dl|table|nav|header|footer|aside)\b([^>]*)>", re.I)
_LANDMARK_TAGS = ("nav", "header", "footer", "aside")
_CLOSES = {tag: re.compile(rf"</{tag}\s*>", re.I) for tag in ("table", *_LANDMARK_TAGS)}
_CLOSES.update(dict.fromkeys(("ul", "ol", "dl"), re.compile(r"</(?:ul|ol|dl)\s*>", re.I)))
# Outermost lists and tables outside navigation landmarks, evaluated by lexbor in C. Tags only:
# attribute selectors (roles, hidden) triple the query's time; those are checked in Python.
_OUTSIDE = ":not(:is(nav, header, footer, aside, menu, dialog, li, dd, dt) *)"
# a table holding a table, a heading or a form lays out the page: the extractor's own rules decide
_LAYOUT = re.compile(r"<(?:table|h[1-3]|form)\b", re.I)
_LIST_SELECTOR, _TABLE_SELECTOR = f":is(ul, ol, dl){_OUTSIDE}", f"table{_OUTSIDE}:not(:has(table, h1, h2, h3, form))"
_PARAGRAPHS = "p, h1, h2, h3, h4, h5, h6, pre, blockquote"
_CONTENT_ROOTS = frozenset({"body", "main", "article", "#document"})
# Navigation in a start tag's attribute markup: a class, id or ARIA role token of a menu, breadcrumb,
# sidebar, ... (the unambiguous words also at the end of a token: "sphinxsidebar"), or hidden.
_NAVIGATION = re.compile(
    r"""(?:^|[\s_"'=-])(?:\w*(?:sidebar|breadcrumbs?|navbar|navigation|footer|pagination|toctree)|nav|menu|menubar|"""
    r"menuitem|crumbs|header|toc|related|share|sharing|social|comments?|pager|widget|tags|cookies?|masthead|skip|"
    r"hidden|d-none|modal|popup|dialog|dropdown|banner|contentinfo|complementary|search|toolbar|tablist|ads?|"
    r"""advert\w*|promo\w*|newsletter|subscribe)(?:$|[\s_"'=-])|display\s*:\s*none|visibility\s*:\s*hidden""", re.I)
_ITEM = re.compile(r"<(li|dt|dd)\b([^>]*)>", re.I)
_ROW, _CELL = re.compile(r"<tr\b[^>]*>", re.I), re.compile(r"<t[dh]\b[^>]*>", re.I)
_LINK = re.compile(r"<a\b[^>]*>(.*?)</a\s*>", re.I | re.S)
_SCRIPT = re.compile(r"<(script|style|template)\b.*?</\1\s*>", re.I | re.S)
_BLOCK_TAG = re.compile(r"<(?:br|/?(?:p|div|pre|blockquote|h[1-6]|tr|ul|ol|dl|li|dd|dt|td|th|table)\b)[^>]*>", re.I)
_TAG = re.compile(r"<[^>]*>")
_MARK, _ROW_MARK = "\x00", "\x01"  # where items (cells) and rows start, through the tag stripping
_UNSET = object()  # the article container before it is looked for
_CONTAINER_SHARE = 0.8  # share of the extracted paragraph text that the article container holds
_ANCHOR_CHARS = 40  # non-space characters of a neighbour that locate it in the extracted text
_MIN_ANCHOR_CHARS = 15  # shorter neighbours ("Note:") are too common to locate anything


class Style(NamedTuple):
    """How the backend writes lists and tables, so that rescued ones read like its own."""

    bullet: str
    cell_separator: str
    paragraph_break: str


class Block(NamedTuple):
    """A list or table read from its HTML: its lines and the texts of its items (table cells)."""

    lines: list[str]
    items: list[str]


def rescue(html: str, text: str, lists: bool, tables: bool, style: Style, tree: HTMLTree | None = None) -> str:
    """`text` (a backend's extraction of `html`, parsed as `tree` if at hand) with the article's
    dropped prose lists (`lists`) and tables (`tables`) put back."""
    text_key = _screen(html, text, lists, tables, style) if text.strip() else None
    if text_key is None:
        return text
    if tree is None:  # imported here: the stage's setup, not its module import, loads the extractors
        from resiliparse.parse.html import HTMLTree

        tree = HTMLTree.parse(html)
    body = tree.body
    if body is None:
        return text
    selector = ", ".join(([_LIST_SELECTOR] if lists else []) + ([_TABLE_SELECTOR] if tables else []))
    candidates = [(el, el.html) for el in body.query_selector_all(selector)]
    repeats = Counter(markup for _, markup in candidates)
    container = _UNSET
    for el, markup in candidates:
        if repeats[markup] > 1 or not prose(markup):
            continue
        block = read_block(markup, style)
        if _present(block, text_key) or _inside_navigation(el):
            continue
        anchor = _anchor(el, text_key)
        if anchor is None:
            # looked for only when a prose list has no extracted neighbour: it reads every paragraph
            container = _article_container(body, text_key) if container is _UNSET else container
            if not _inside(el, container):
                continue
        text = _insert(text, text_key, "\n".join(block.lines), anchor, style)
        text_key = _key(text)
    return text


def _screen(html: str, text: str, lists: bool, tables: bool, style: Style) -> str | None:
    """The text without white space if a list or table of the raw page outside the landmarks (read
    up to the first closing tag of its kind) could be put back, else None."""
    text_key, pos = None, 0
    while (match := _OPEN_OR_LANDMARK.search(html, pos)) is not None:
        tag = match.group(1).lower()
        if tag in _LANDMARK_TAGS:
            end = _CLOSES[tag].search(html, match.end())
            pos = end.end() if end else len(html)
            continue
        pos = match.end()
        if not (tables if tag == "table" else lists) or _NAVIGATION.search(match.group(2)):
            continue  # (prose() would say no too; this spares cutting out the markup)
        end = _CLOSES[tag].search(html, pos)
        markup = html[match.start():end.start() if end else len(html)]
        if (tag == "table" and _LAYOUT.search(markup, 6)) or not prose(markup):
            continue
        text_key = _key(text) if text_key is None else text_key
        if not _present(read_block(markup, style), text_key):
            return text_key
    return None


def prose(markup: str) -> bool:
    """Whether a list's or table's outer HTML carries prose rather than links, and is not named as
    navigation (it or most of its items); thresholds in the module docstring. Counted over the
    whole markup at once (every tag separates words, entities stay as they are: one regex pass):
    most lists on a page are menus, and this is the test that rejects them."""
    start = _OPEN.match(markup)
    if _NAVIGATION.search(start.group(2)):
        return False
    is_table = start.group(1).lower() == "table"
    units = _CELL.split(markup)[1:] if is_table else _ITEM.findall(markup)
    if not is_table and sum(1 for _, attrs in units if attrs and _NAVIGATION.search(attrs)) > len(units) / 2:
        return False
    markup = _SCRIPT.sub("", markup)
    words = _count_words(markup)
    link_words = _TAG.sub(" ", " ".join(_LINK.findall(markup))).split()
    if not words or not units:
        return False
    if is_table:
        return len(link_words) <= words / 2 and max(map(_count_words, units)) >= 6
    if not link_words:
        return True
    if len(link_words) <= words / 2:
        return words >= 4 * len(units)
    return words >= 7 * len(units) and not _title_case(link_words)


def read_block(markup: str, style: Style) -> Block:
    """The lines and items of a list's or table's outer HTML (one pass of the tag regexes over the
    whole markup, not one per item)."""
    markup = _SCRIPT.sub("", markup)
    if markup[:6].lower() == "<table":
        rows = [[_collapse(cell) for cell in row.split(_MARK)[1:]]
                for row in _plain(_ROW.sub(_ROW_MARK, _CELL.sub(_MARK, markup))).split(_ROW_MARK)[1:]]
        lines = [style.cell_separator.join(cells) for cells in rows if any(cells)]
        return Block(lines, [cell for cells in rows for cell in cells if cell])
    parts = _ITEM.split(markup)
    texts = [_collapse(part) for part in _plain(_MARK.join(parts[3::3])).split(_MARK)]
    tagged = [(tag.lower(), item) for tag, item in zip(parts[1::3], texts) if item]
    return Block([(style.bullet if tag == "li" else "") + item for tag, item in tagged], [item for _, item in tagged])


def _plain(markup: str) -> str:
    """Text of HTML (block tags separate words, inline ones don't; the item marks stay)."""
    text = _TAG.sub("", _BLOCK_TAG.sub(" ", markup))
    return html_lib.unescape(text) if "&" in text else text


def _count_words(markup: str) -> int:
    return len(_TAG.sub(" ", markup).split())


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _key(text: str) -> str:
    """Text without white space: backends lay lines out differently, characters stay the same."""
    return "".join(text.split())


def _title_case(words: list[str]) -> bool:
    """Whether most longer words are capitalised (headlines and menu entries, not sentences)."""
    long_words = [w for w in words if len(w) > 3 and w[0].isalpha()]
    return sum(w[0].isupper() for w in long_words) > len(long_words) / 2


def _present(block: Block, text_key: str) -> bool:
    """Whether most of the block's text (by characters) already is in the extracted text."""
    keys = [_key(item) for item in block.items]
    return sum(len(k) for k in keys if k in text_key) >= sum(len(k) for k in keys) / 2


def _inside_navigation(el) -> bool:
    """Whether an ancestor of `el` up to the article (<main>, <article>, role=main) or <body> is
    navigation (navigation tags are left out by the selector already)."""
    node = el.parent
    while node is not None and node.tag not in _CONTENT_ROOTS and node.getattr("role") != "main":
        if _NAVIGATION.search(" ".join(f'{name}="{node.getattr(name)}"' for name in node.attrs)):
            return True
        node = node.parent
    return False


def _anchor(el, text_key: str) -> tuple[str, bool] | None:
    """(key, after) of an extracted neighbour: the end of the previous element sibling (the block
    goes after it) or the start of the next one (before it); None when neither was extracted."""
    for sibling, after in ((el.previous_element_sibling, True), (el.next_element_sibling, False)):
        if sibling is None:
            continue
        key = _key(sibling.text)
        key = key[-_ANCHOR_CHARS:] if after else key[:_ANCHOR_CHARS]
        if len(key) >= _MIN_ANCHOR_CHARS and key in text_key:
            return key, after
    return None


def _article_container(body, text_key: str):
    """The deepest element holding `_CONTAINER_SHARE` of the extracted paragraphs' text (None: none)."""
    weight: dict = {}
    total = 0
    for par in body.query_selector_all(_PARAGRAPHS):
        key = _key(par.text)
        if len(key) < _MIN_ANCHOR_CHARS or key not in text_key:
            continue
        total += len(key)
        node = par.parent
        while node is not None and node.tag != "#document":
            weight[node] = weight.get(node, 0) + len(key)
            node = node.parent
    covering = [(w, node) for node, w in weight.items() if w >= _CONTAINER_SHARE * total]
    # weights grow towards the root, so the lightest covering element is the deepest
    return min(covering, key=lambda pair: pair[0])[1] if covering else None


def _inside(el, container) -> bool:
    node = el.parent
    while node is not None and container is not None:
        if node == container:
            return True
        node = node.parent
    return False


def _insert(text: str, text_key: str, block: str, anchor: tuple[str, bool] | None, style: Style) -> str:
    """`block` as its own paragraph after (or before) the line holding the anchor; at the end without one.
    The anchor is found in the text without white space (`text_key`), then its line by counting characters."""
    offset = text_key.find(anchor[0]) if anchor else -1
    if offset < 0:
        return f"{text.rstrip()}{style.paragraph_break}{block}"
    key, after = anchor
    target, seen, lines = (offset + len(key) if after else offset + 1), 0, text.split("\n")
    for i, line in enumerate(lines):
        seen += len(_key(line))
        if seen >= target:
            break
    if after:
        head = "\n".join(lines[:i + 1])
        return f"{head}{style.paragraph_break}{block}{text[len(head):]}"
    head = "".join(line + "\n" for line in lines[:i])
    return f"{head}{block}{style.paragraph_break}{text[len(head):]}"
