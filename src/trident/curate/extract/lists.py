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
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from trident.curate.extract.placement import Placement, squeeze
from trident.curate.extract.text_index import TextIndex

if TYPE_CHECKING:
    from resiliparse.parse.html import HTMLTree


def _tags(*names: str) -> str:
    """A regex alternation of tag names in either letter case, as HTML reads them. Not the
    IGNORECASE flag: with it sre folds every character it compares (the block-tag pass over a
    page's list markup ran 2.7x slower)."""
    return "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in name) for name in names)


def _first_letters(*names: str) -> str:
    """A class of the tag names' first letters (either case), for a lookahead that turns most tags (a,
    span, code) away before an alternation of names is tried (the block-tag pass 1.7x faster)."""
    letters = "".join(sorted({name[0] for name in names}))
    return f"[{letters}{letters.upper()}]"


_BLOCKS = ("p", "div", "pre", "blockquote", "tr", "ul", "ol", "dl", "li", "dd", "dt", "td", "th", "table")
_OPEN = re.compile(rf"<({_tags('ul', 'ol', 'dl', 'table')})\b([^>]*)>")
# The screen skips the landmarks whole (they do not nest in themselves, so the first close ends them).
_LANDMARK_TAGS = ("nav", "header", "footer", "aside")
_SCREENED = ("ul", "ol", "dl", "table", *_LANDMARK_TAGS)
_OPEN_OR_LANDMARK = re.compile(rf"<(?={_first_letters(*_SCREENED)})({_tags(*_SCREENED)})\b([^>]*)>")
_CLOSES = {tag: re.compile(rf"</{_tags(tag)}\s*>") for tag in ("table", *_LANDMARK_TAGS)}
_CLOSES.update(dict.fromkeys(("ul", "ol", "dl"), re.compile(rf"</(?:{_tags('ul', 'ol', 'dl')})\s*>")))
# Outermost lists and tables outside navigation landmarks, evaluated by lexbor in C. Tags only:
# attribute selectors (roles, hidden) triple the query's time; those are checked in Python.
_OUTSIDE = ":not(:is(nav, header, footer, aside, menu, dialog, li, dd, dt) *)"
# a table holding a table, a heading or a form lays out the page: the extractor's own rules decide
_LAYOUT = re.compile(rf"<(?:{_tags('table', 'form')}|{_tags('h')}[1-3])\b")
_LIST_SELECTOR, _TABLE_SELECTOR = f":is(ul, ol, dl){_OUTSIDE}", f"table{_OUTSIDE}:not(:has(table, h1, h2, h3, form))"
_PARAGRAPHS = "p, h1, h2, h3, h4, h5, h6, pre, blockquote"
_CONTENT_ROOTS = frozenset({"body", "main", "article", "#document"})
# Navigation in a start tag's attribute markup: a class, id or ARIA role token of a menu, breadcrumb,
# sidebar, ... (the unambiguous words also at the end of a token: "sphinxsidebar"), or hidden. Matched against
# the markup lower-cased (2.7x faster than the IGNORECASE flag), through _is_navigation.
_NAVIGATION = re.compile(
    r"""(?:^|[\s_"'=-])(?:\w*(?:sidebar|breadcrumbs?|navbar|navigation|footer|pagination|toctree)|nav|menu|menubar|"""
    r"menuitem|crumbs|header|toc|related|share|sharing|social|comments?|pager|widget|tags|cookies?|masthead|skip|"
    r"hidden|d-none|modal|popup|dialog|dropdown|banner|contentinfo|complementary|search|toolbar|tablist|ads?|"
    r"""advert\w*|promo\w*|newsletter|subscribe)(?:$|[\s_"'=-])|display\s*:\s*none|visibility\s*:\s*hidden""")
_ITEM = re.compile(rf"<({_tags('li', 'dt', 'dd')})\b([^>]*)>")
_ROW, _CELL = re.compile(rf"<{_tags('tr')}\b[^>]*>"), re.compile(rf"<(?:{_tags('td', 'th')})\b[^>]*>")
_LINK = re.compile(rf"<{_tags('a')}\b[^>]*>(.*?)</{_tags('a')}\s*>", re.S)
_SCRIPT = re.compile("|".join(rf"<{_tags(tag)}\b.*?</{_tags(tag)}\s*>" for tag in ("script", "style", "template")),
                     re.S)
_SCRIPT_STARTS = ("<s", "<S", "<t", "<T")  # what a _SCRIPT match begins with: a C substring test first
_BLOCK_TAG = re.compile(rf"<(?=/?{_first_letters('br', 'h', *_BLOCKS)})"
                        rf"(?:{_tags('br')}|/?(?:{_tags(*_BLOCKS)}|{_tags('h')}[1-6])\b)[^>]*>")
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
    dropped prose lists (`lists`) and tables (`tables`) put back. Time linear in the page: each
    element's ancestors are looked at once, text look-ups use a TextIndex, and the text is written
    once with every block in its place (trident.curate.extract.placement)."""
    index = _screen(html, text, lists, tables, style) if text.strip() else None
    if index is None:
        return text
    if tree is None:  # imported here: the stage's setup, not its module import, loads the extractors
        from resiliparse.parse.html import HTMLTree

        tree = HTMLTree.parse(html)
    body = tree.body
    if body is None:
        return text
    selector = ", ".join(([_LIST_SELECTOR] if lists else []) + ([_TABLE_SELECTOR] if tables else []))
    candidates = [(el, el.html) for el in select_all(body, selector)]
    repeats = Counter(markup for _, markup in candidates)
    placement, walks, container = Placement(text, index, style.paragraph_break), _Walks(), _UNSET
    for el, markup in candidates:
        if repeats[markup] > 1:
            continue
        bare = _without_scripts(markup)
        if not prose(markup, bare) or _present(*_block_keys(bare, style), index) or walks.in_navigation(el):
            continue
        neighbour, after, slot = _anchor(el, placement)
        if neighbour is None and slot is None:
            # looked for only when a prose list has no extracted neighbour: it reads every paragraph
            container = _article_container(body, index) if container is _UNSET else container
            if not walks.inside(el, container):
                continue
        placement.add(el, "\n".join(_read_bare(bare, style).lines), slot, neighbour, after)
    return placement.result()


def select_all(node, selector: str) -> tuple:
    """``node.query_selector_all(selector)`` as a tuple: resiliparse's node list walks its matches from
    the start for every item a loop takes (2,109 paragraphs: 4.4M node wrappers, 69 s), a slice copies
    them all in one pass (13 ms)."""
    return node.query_selector_all(selector)[:]


def _screen(html: str, text: str, lists: bool, tables: bool, style: Style) -> TextIndex | None:
    """The index of the text without white space if a list or table of the raw page outside the
    landmarks (read up to the first closing tag of its kind) could be put back, else None."""
    index, pos = None, 0
    while (match := _OPEN_OR_LANDMARK.search(html, pos)) is not None:
        tag = match.group(1).lower()
        if tag in _LANDMARK_TAGS:
            end = _CLOSES[tag].search(html, match.end())
            pos = end.end() if end else len(html)
            continue
        pos = match.end()
        if not (tables if tag == "table" else lists) or _is_navigation(match.group(2)):
            continue  # (prose() would say no too; this spares cutting out the markup)
        end = _CLOSES[tag].search(html, pos)
        markup = html[match.start():end.start() if end else len(html)]
        if tag == "table" and _LAYOUT.search(markup, 6):
            continue
        bare = _without_scripts(markup)
        if not prose(markup, bare):
            continue
        index = TextIndex.of_lines(text) if index is None else index
        if not _present(*_block_keys(bare, style), index):
            return index
    return None


def prose(markup: str, bare: str | None = None) -> bool:
    """Whether a list's or table's outer HTML carries prose rather than links, and is not named as
    navigation (it or most of its items); thresholds in the module docstring. Counted over the
    whole markup at once (every tag separates words, entities stay as they are: one regex pass):
    most lists on a page are menus, and this is the test that rejects them. ``bare``: the markup
    without its scripts, when the caller has it."""
    start = _OPEN.match(markup)
    if _is_navigation(start.group(2)):
        return False
    is_table = start.group(1).lower() == "table"
    units = _CELL.split(markup)[1:] if is_table else _ITEM.findall(markup)
    if not is_table and sum(1 for _, attrs in units if attrs and _is_navigation(attrs)) > len(units) / 2:
        return False
    markup = _without_scripts(markup) if bare is None else bare
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
    return _read_bare(_without_scripts(markup), style)


def _read_bare(markup: str, style: Style) -> Block:
    """read_block of a list's or table's outer HTML without its scripts."""
    if markup[:6].lower() == "<table":
        rows = [[_collapse(cell) for cell in row.split(_MARK)[1:]]
                for row in _plain(_ROW.sub(_ROW_MARK, _CELL.sub(_MARK, markup))).split(_ROW_MARK)[1:]]
        lines = [style.cell_separator.join(cells) for cells in rows if any(cells)]
        return Block(lines, [cell for cells in rows for cell in cells if cell])
    tags, texts = _item_texts(markup)
    tagged = [(tag.lower(), item) for tag, item in zip(tags, map(_collapse, texts)) if item]
    return Block([(style.bullet if tag == "li" else "") + item for tag, item in tagged], [item for _, item in tagged])


def _item_texts(markup: str) -> tuple[list[str], list[str]]:
    """(each item's tag, its text as _plain leaves it) of a list's markup without scripts."""
    parts = _ITEM.split(markup)
    return parts[1::3], _plain(_MARK.join(parts[3::3])).split(_MARK)


@lru_cache(maxsize=1 << 12)
def _is_navigation(attributes: str) -> bool:
    """Whether a start tag's attribute markup names navigation (_NAVIGATION). Remembered: a site's
    lists and items repeat a few attributes (766 documentation pages: 29,117 attributes, 4,505 distinct)."""
    return _NAVIGATION.search(attributes.lower()) is not None


def _without_scripts(markup: str) -> str:
    """The markup without its script, style and template elements."""
    return _SCRIPT.sub("", markup) if any(start in markup for start in _SCRIPT_STARTS) else markup


def _plain(markup: str) -> str:
    """Text of HTML (block tags separate words, inline ones don't; the item marks stay)."""
    text = _TAG.sub("", _BLOCK_TAG.sub(" ", markup))
    return html_lib.unescape(text) if "&" in text else text


def _count_words(markup: str) -> int:
    return len(_TAG.sub(" ", markup).split())


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _title_case(words: list[str]) -> bool:
    """Whether most longer words are capitalised (headlines and menu entries, not sentences)."""
    long_words = [w for w in words if len(w) > 3 and w[0].isalpha()]
    return sum(w[0].isupper() for w in long_words) > len(long_words) / 2


def _block_keys(markup: str, style: Style) -> tuple[str, list[str]]:
    """_keys(read_block) of a list's or table's markup without scripts; a list's in one pass over each item."""
    return _keys(_read_bare(markup, style)) if markup[:6].lower() == "<table" else _list_keys(markup, style)


def _keys(block: Block) -> tuple[str, list[str]]:
    """(the block's lines joined, each of its items), without white space: what _present looks up."""
    return squeeze("".join(block.lines)), [squeeze(item) for item in block.items]


def _list_keys(markup: str, style: Style) -> tuple[str, list[str]]:
    """_keys(read_block(markup, style)) of a list's markup without scripts, with one pass over each
    item's text, not two (the screen reads 5,500 lists of 766 documentation pages)."""
    tags, texts = _item_texts(markup)
    items = list(map(squeeze, texts))
    bullet = squeeze(style.bullet)
    tagged = [(bullet if tag.lower() == "li" else "") + item for tag, item in zip(tags, items) if item]
    return "".join(tagged), [item for item in items if item]


def _present(whole: str, keys: list[str], index: TextIndex) -> bool:
    """Whether most of a block's text (by characters) already is in the extracted text, given its
    _keys: the whole block, or items holding half its characters."""
    if whole and whole in index:  # the common case, the backend kept the list: each item is in it too
        return True
    keys = sorted(keys, key=len, reverse=True)
    total = sum(map(len, keys))
    found = missing = 0
    for key in keys:  # the longest first, each deciding the most, until the answer is known either way
        if key in index:
            found += len(key)
        else:
            missing += len(key)
        if found >= total / 2 or missing > total / 2:
            break
    return found >= total / 2


class _Walks:
    """Answers about an element's ancestors, each ancestor's answer remembered: every element of the
    page is looked at once however many lists sit below it (walking up from each list anew was
    quadratic on deeply nested pages)."""

    def __init__(self) -> None:
        self._navigation: dict = {}
        self._inside: dict = {}

    def in_navigation(self, el) -> bool:
        """Whether an ancestor of `el` up to the article (<main>, <article>, role=main) or <body> is
        navigation (navigation tags are left out by the selector already)."""
        path, node, found = [], el.parent, False
        while node is not None and node.tag not in _CONTENT_ROOTS and node.getattr("role") != "main":
            if node in self._navigation:
                found = self._navigation[node]
                break
            path.append(node)
            if _is_navigation(" ".join(f'{name}="{node.getattr(name)}"' for name in node.attrs)):
                found = True
                break
            node = node.parent
        return self._remember(self._navigation, path, found)

    def inside(self, el, container) -> bool:
        """Whether `el` lies inside `container` (None: nowhere)."""
        path, node, found = [], el.parent, False
        while node is not None and container is not None:
            if node == container or node in self._inside:
                found = node == container or self._inside[node]
                break
            path.append(node)
            node = node.parent
        return self._remember(self._inside, path, found)

    @staticmethod
    def _remember(memo: dict, path: list, found: bool) -> bool:
        memo.update(dict.fromkeys(path, found))
        return found


def _anchor(el, placement: Placement) -> tuple:
    """(rescued neighbour, after, None) or (None, after, slot) of an extracted neighbour: the end of
    the previous element sibling (the block goes after it) or the start of the next one (before
    it); (None, True, None) when neither was extracted nor put back."""
    for sibling, after in ((el.previous_element_sibling, True), (el.next_element_sibling, False)):
        if sibling is None:
            continue
        key = squeeze(sibling.text)
        if len(key) < _MIN_ANCHOR_CHARS:
            continue
        if placement.rescued(sibling):
            return sibling, after, None
        slot = placement.text_slot(key[-_ANCHOR_CHARS:] if after else key[:_ANCHOR_CHARS], after)
        if slot is not None:
            return None, after, slot
    return None, True, None


def _article_container(body, index: TextIndex):
    """The deepest element holding `_CONTAINER_SHARE` of the extracted paragraphs' text (None: none).
    Each element is visited once: a paragraph's walk up stops at the first element seen before."""
    own: dict = {}  # element -> text of the extracted paragraphs right below it
    parent: dict = {}  # every element above an extracted paragraph -> its parent (None above the top)
    total = 0
    for par in select_all(body, _PARAGRAPHS):
        key = squeeze(par.text)
        if len(key) < _MIN_ANCHOR_CHARS or key not in index:
            continue
        total += len(key)
        node = par.parent
        if node is None or node.tag == "#document":
            continue
        own[node] = own.get(node, 0) + len(key)
        while node is not None and node not in parent:
            up = node.parent
            parent[node] = up if up is not None and up.tag != "#document" else None
            node = parent[node]
    weight = dict.fromkeys(parent, 0)
    for node in sorted(parent, key=_depth_of(parent), reverse=True):  # children before their parents
        weight[node] += own.get(node, 0)
        if parent[node] is not None:
            weight[parent[node]] += weight[node]
    covering = [(w, node) for node, w in weight.items() if w >= _CONTAINER_SHARE * total]
    # weights grow towards the root, so the lightest covering element is the deepest
    return min(covering, key=lambda pair: pair[0])[1] if covering else None


def _depth_of(parent: dict):
    """Depth of each element of a parent map (its top at 0), each computed once."""
    depth: dict = {}
    for node in parent:
        path = []
        while node is not None and node not in depth:
            path.append(node)
            node = parent[node]
        base = depth[node] if node is not None else -1
        for offset, step in enumerate(reversed(path), start=1):
            depth[step] = base + offset
    return depth.__getitem__
