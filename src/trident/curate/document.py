"""The unit of curation: a document with an id, its text and free-form metadata.

JSON-line form (flat, so ordinary `{"text": ...}` corpora read without conversion):

    {"id": "<id>", "text": "<text>", "<meta key>": <value>, ...}

`Document.from_json(doc.to_json()) == doc` for every document whose meta holds JSON values and
no "id"/"text" key. Common meta keys: "source" (input file name), "url", "dataset" (the corpus a
document belongs to, used by cross-dataset dedup priority), "quality_score", "language".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESERVED_KEYS = ("id", "text")


class CurateError(RuntimeError):
    """A curation failure the user must act on (bad config, strict-mode bad record, broken accounting)."""


@dataclass
class Document:
    """One document. `meta` never holds "id" or "text" (those are fields)."""

    id: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The flat JSON-line object: id, text, then the meta keys."""
        clash = [k for k in RESERVED_KEYS if k in self.meta]
        if clash:
            raise CurateError(f"document {self.id!r}: meta may not contain reserved key(s) {clash}")
        return {"id": self.id, "text": self.text, **self.meta}

    @classmethod
    def from_json(cls, obj: Any, default_id: str) -> "Document":
        """Inverse of to_json. `default_id` names records that carry no "id" (e.g. "file.jsonl:17").

        Raises ValueError (with the reason) when the object is not a JSON object with a string "text".
        """
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        text = obj.get("text")
        if not isinstance(text, str):
            raise ValueError('missing string field "text"')
        meta = dict(obj)  # a copy without id and text: faster than a filtering comprehension
        doc_id = meta.pop("id", None)
        del meta["text"]
        return cls(id=str(doc_id) if doc_id is not None else default_id, text=text, meta=meta)

    @property
    def nbytes(self) -> int:
        """Size of the text in UTF-8 bytes (what the byte counters add up). Kept with the text it was
        counted on: each stage counts a document's bytes in and out, mostly of a text left as it was."""
        text, known = self.text, self.__dict__.get("_nbytes")
        if known is not None and known[0] is text:
            return known[1]
        size = len(text) if text.isascii() else len(text.encode("utf-8", errors="surrogatepass"))
        self.__dict__["_nbytes"] = (text, size)
        return size
