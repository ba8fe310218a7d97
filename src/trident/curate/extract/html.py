"""HTML -> main text, boilerplate (menus, footers, cookie banners) removed, with one of two extractors:
resiliparse (main-content plain text, C++; the default) or trafilatura (Python + lxml)."""
from __future__ import annotations

import logging
import re
from typing import Callable

from trident.curate.document import Document
from trident.curate.extract.lists import Style, rescue, select_all
from trident.curate.stage import StreamingStage, register_stage

# benchmarks/extract.py measured both on the sample WARCs and on generated pages (docs/curation.md):
# resiliparse is ~20x faster with equal recall of the article text, so it is the default.
EXTRACT_BACKENDS = ("resiliparse", "trafilatura")
# What an extractor raises on hostile markup; the document is counted as extract_error.
_MARKUP_ERRORS = (ValueError, TypeError, AttributeError, LookupError)
# Rescued lists and tables are written the way each backend writes the ones it keeps.
_RESILIPARSE_STYLE = Style(bullet="• ", cell_separator="\t\t", paragraph_break="\n\n")
_TRAFILATURA_STYLE = Style(bullet="- ", cell_separator=" | ", paragraph_break="\n")
_WORD = re.compile(r"[^\W_]+")
_HEADINGS = "h1, h2, h3, h4, h5, h6"
_CHROME_NAME = re.compile(r"header|masthead|banner|title", re.I)  # a title block's id/class read as chrome
_SITE_HEADER_PARTS = "a[href], ul, ol, nav, form, input, img, button"  # what a site's header holds, a man page's not
_CONTAINER_DEPTH = 4  # DocBook: div.sect1[id] > div.titlepage > div > div > h2


@register_stage("extract")
class Extract(StreamingStage):
    """Turns HTML documents (from WARC responses or .html files) into their main text.

    `backend`: "resiliparse" or "trafilatura" (both installed with trident, nothing downloaded).
    `favor_precision` and `include_tables` are trafilatura's; `include_comments` applies to both.
    `keep_lists` / `keep_tables` (both backends): put back the article's lists / tables that carry
    prose (items with text beside their links, descriptive link sentences, API lists, parameter
    tables) when the backend dropped them, navigation left out (trident.curate.extract.lists).
    Drops, by reason:
    `non_200` (HTTP status other than 200), `non_html` (content type without "html"),
    `no_main_text` (nothing left after boilerplate removal, or fewer than `min_chars`),
    `extract_error` (the HTML could not be parsed). Documents read from JSONL (no content type)
    are already text and pass through unchanged (counted as `passthrough:text`).
    """

    def __init__(self, backend: str = "resiliparse", favor_precision: bool = True, include_tables: bool = False,
                 include_comments: bool = False, min_chars: int = 1, keep_lists: bool = True,
                 keep_tables: bool = True) -> None:
        if backend not in EXTRACT_BACKENDS:
            raise ValueError(f"parameter 'backend' must be one of {list(EXTRACT_BACKENDS)}, got {backend!r}")
        super().__init__(backend=backend, favor_precision=favor_precision, include_tables=include_tables,
                         include_comments=include_comments, min_chars=min_chars, keep_lists=keep_lists,
                         keep_tables=keep_tables)
        self.min_chars = min_chars
        self._extractor: Callable[[str, str | None], str] | None = None

    def setup(self) -> None:
        # imported here so that start-up is not timed as extraction
        maker = _resiliparse if self.params["backend"] == "resiliparse" else _trafilatura
        self._extractor = maker(self.params)

    def apply(self, doc: Document) -> Document | str:
        if "content_type" not in doc.meta:
            self.counters["passthrough:text"] += 1
            return doc
        content_type = str(doc.meta.pop("content_type"))
        status = doc.meta.pop("http_status", 200)
        if status != 200:
            self.counters[f"http_status:{status}"] += 1
            return "non_200"
        if "html" not in content_type.lower():
            return "non_html"
        text = self._extract(doc)
        if text is None:
            return "extract_error"
        if len(text.strip()) < self.min_chars:
            return "no_main_text"
        doc.text = text
        return doc

    def _extract(self, doc: Document) -> str | None:
        if self._extractor is None:
            self.setup()
        try:
            return self._extractor(doc.text, doc.meta.get("url") or None) or ""
        except _MARKUP_ERRORS as err:
            self.counters[f"extract_error:{type(err).__name__}"] += 1
            return None


def _trafilatura(params: dict) -> Callable[[str, str | None], str]:
    """trafilatura.extract with the stage's options (no in-document deduplication)."""
    import trafilatura

    # trafilatura logs every page it finds too short; those are counted by the stage instead.
    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    keep = params["keep_lists"] or params["keep_tables"]

    def extract(html: str, url: str | None) -> str:
        text = trafilatura.extract(html, url=url, favor_precision=params["favor_precision"],
                                   include_tables=params["include_tables"],
                                   include_comments=params["include_comments"], deduplicate=False) or ""
        if keep:
            text = rescue(html, text, params["keep_lists"], params["keep_tables"], _TRAFILATURA_STYLE)
        return text

    return extract


def _resiliparse(params: dict) -> Callable[[str, str | None], str]:
    """resiliparse's main-content plain text: paragraphs on their own lines, no image alt texts,
    link targets, form fields or <noscript>; comment sections only when asked for. Its main-content
    rules decide on tables (skipping every <table> would drop whole pages laid out with tables);
    the list post-pass puts back the prose lists and tables they dropped.
    A paragraph repeated within the page is kept once, as trafilatura does (spam pages repeat one).
    Sections named after their heading lose their id first (unmask_sections)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    keep = params["keep_lists"] or params["keep_tables"]

    def extract(html: str, url: str | None) -> str:
        tree = HTMLTree.parse(html)  # parsed once for the extractor and the list post-pass
        title = _title(tree.body) if tree.body else None
        if title is not None:
            title_containers = _heading_and_containers(title)  # walked up once: each step up builds a node wrapper
            unmask_sections(tree, title_containers)
            unmask_title_block(title_containers)
        text = extract_plain_text(tree, main_content=True, alt_texts=False, links=False, form_fields=False,
                                  noscript=False, comments=params["include_comments"])
        if keep:
            text = rescue(html, text, params["keep_lists"], params["keep_tables"], _RESILIPARSE_STYLE, tree)
        return first_occurrences(text)

    return extract


def unmask_sections(tree, title_containers: list) -> int:
    """Remove the ``id`` of the sections named after their own heading, so that resiliparse's
    main-content rules, which read words such as "related", "comment" or "copyright" in an id as
    page chrome, do not drop them (documentation generators name a section after its title:
    texinfo's ``<div class="section" id="Exception-Related-Functions">``, Sphinx's ``<section
    id="copyright">``, DocBook's ``<div class="refentry" id="SQL-COMMENT">``). A section is named
    after its heading when its id spells the heading (section numbers aside) and the heading has
    three words or more, or when it holds the page's title (its first heading of the highest level)
    and shares a word with it
    (page chrome holds neither: "Related posts", "Comments" keep their ids). Returns ids removed.
    Only the title and the headings some id of the page spells are walked up from (each step up
    costs a DOM node wrapper: walks from all 7,390 headings were 14% of extraction on documentation).
    `title_containers`: _heading_and_containers of the page's title (_title)."""
    first = title_containers[0]
    spelled = {tuple(named) for named in (_WORD.findall(el.id.casefold()) for el in select_all(tree.body, "[id]"))
               if len(named) >= 3}
    others = [heading for heading in select_all(tree.body, _HEADINGS) if heading != first] if spelled else []
    removed = 0
    for heading in [first, *others]:  # the same ids go whatever the order: each test reads the ids as parsed
        title = [w for w in _WORD.findall(heading.text.casefold()) if not w.isdigit()]
        if heading != first and tuple(title) not in spelled:
            continue
        for element in title_containers if heading == first else _heading_and_containers(heading):
            named = _WORD.findall((element.id or "").casefold())
            if named and ((named == title and len(title) >= 3) or (heading == first and set(named) & set(title))):
                element.remove_attribute("id")
                removed += 1
    return removed


def _title(body):
    """The page's title: its first heading of the highest level, in document order."""
    for level in range(1, 7):
        if (heading := body.query_selector(f"h{level}")) is not None:
            return heading
    return None


def unmask_title_block(title_containers: list) -> bool:
    """Remove the id and class of the block that holds the page's title when it is the start of the
    article, not page chrome: a man page's `<div id="header">` holds its title, NAME and the
    command's one-line summary (asciidoc, `git-add(1) Manual Page / NAME / git-add - Add file
    contents to the index`), which resiliparse drops as a page header. The block qualifies when,
    besides the title, it holds another heading followed by text and nothing of a site header:
    no links, lists, navigation, forms or images. Returns whether one was unmasked.
    `title_containers`: _heading_and_containers of the page's title (_title)."""
    for block in title_containers[1:]:
        if not _CHROME_NAME.search(f"{block.id} {block.class_name}"):
            continue
        headings = select_all(block, _HEADINGS)
        if (block.query_selector(_SITE_HEADER_PARTS) is None and len(headings) >= 2
                and headings[-1].next_element_sibling is not None and headings[-1].next_element_sibling.text.strip()):
            block.remove_attribute("id")
            block.remove_attribute("class")
            return True
        return False
    return False


def _heading_and_containers(heading) -> list:
    """A heading and the elements up to _CONTAINER_DEPTH levels above it (DocBook wraps a title in
    titlepage and refnamediv blocks inside the section that carries the id)."""
    found = [heading]
    while len(found) <= _CONTAINER_DEPTH:
        parent = found[-1].parent  # once: each call builds a new wrapper
        if parent is None or parent.tag == "body":
            break
        found.append(parent)
    return found


def first_occurrences(text: str) -> str:
    """`text` without the paragraphs (non-blank lines) that repeat an earlier one; blank lines kept
    as single separators."""
    seen: set[str] = set()
    kept: list[str] = []
    for line in text.split("\n"):
        key = line.strip()
        if key in seen or (not key and (not kept or not kept[-1].strip())):
            continue
        if key:
            seen.add(key)
        kept.append(line)
    return "\n".join(kept).strip("\n")
