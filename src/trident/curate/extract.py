"""HTML -> main text with trafilatura (boilerplate such as menus, footers and cookie banners removed)."""
from __future__ import annotations

import logging

from trident.curate.document import Document
from trident.curate.stage import StreamingStage, register_stage


@register_stage("extract")
class Extract(StreamingStage):
    """Turns HTML documents (from WARC responses or .html files) into their main text.

    Drops, by reason: `non_200` (HTTP status other than 200), `non_html` (content type without
    "html"), `no_main_text` (nothing left after boilerplate removal, or fewer than `min_chars`),
    `extract_error` (the HTML could not be parsed). Documents read from JSONL (no content type)
    are already text and pass through unchanged (counted as `passthrough:text`).
    """

    def __init__(self, favor_precision: bool = True, include_tables: bool = False,
                 include_comments: bool = False, min_chars: int = 1) -> None:
        super().__init__(favor_precision=favor_precision, include_tables=include_tables,
                         include_comments=include_comments, min_chars=min_chars)
        self.min_chars = min_chars

    def setup(self) -> None:
        import trafilatura  # noqa: F401  (imported here so start-up is not timed as extraction)

        # trafilatura logs every page it finds too short; those are counted here instead.
        logging.getLogger("trafilatura").setLevel(logging.ERROR)

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
        import trafilatura

        try:
            text = trafilatura.extract(
                doc.text, url=doc.meta.get("url") or None, favor_precision=self.params["favor_precision"],
                include_tables=self.params["include_tables"], include_comments=self.params["include_comments"],
                deduplicate=False)
        except (ValueError, TypeError, AttributeError, LookupError) as err:
            # lxml/trafilatura raise these on hostile markup; the document is counted as extract_error.
            self.counters[f"extract_error:{type(err).__name__}"] += 1
            return None
        return text or ""
