"""Unicode repair (ftfy) and normalisation of document text."""
from __future__ import annotations

import re
import unicodedata

import ftfy

from trident.curate.document import Document
from trident.curate.stage import StreamingStage, register_stage

# C0/C1 control characters except tab and newline; they carry no text and confuse tokenizers.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u3000]+")
_BLANK_LINES = re.compile(r"\n\s*\n(\s*\n)+")
# A character some ftfy fixer may change: non-ASCII, "&" (HTML entities), ASCII controls other than
# tab and newline (\r line breaks, \x1b terminal escapes, removed controls).
_FTFY_MAY_CHANGE = re.compile(r"[^\t\n\x20-\x25\x27-\x7e]")
_FTFY_CONFIG = ftfy.TextFixerConfig(explain=False, normalization=None)


def fix_text(text: str) -> str:
    """Exactly ftfy.fix_text(text, normalization=None), faster: ftfy fixes one line at a time, and a
    line (or a whole text) without any character that a fixer could change is passed through
    instead of through every fixer. The loop mirrors ftfy's own, including its rule that HTML
    entities stay as they are from the first line that holds a "<" on."""
    if _FTFY_MAY_CHANGE.search(text) is None:
        return text
    config, out, pos = _FTFY_CONFIG, [], 0
    while pos < len(text):
        end = text.find("\n", pos) + 1 or len(text)
        end = min(end, pos + config.max_decode_length)
        segment = text[pos:end]
        if config.unescape_html == "auto" and "<" in segment:
            config = config._replace(unescape_html=False)
        fixable = _FTFY_MAY_CHANGE.search(segment) is not None
        out.append(ftfy.fix_and_explain(segment, config)[0] if fixable else segment)
        pos = end
    return "".join(out)


@register_stage("clean")
class Clean(StreamingStage):
    """Repairs mojibake and broken Unicode with ftfy, applies a Unicode normal form, removes control
    characters, collapses runs of spaces and of blank lines. Counts `changed:ftfy`,
    `changed:normalize`, `changed:whitespace`; drops `empty` (nothing but whitespace left)."""

    def __init__(self, normalization: str | None = "NFC", fix_unicode: bool = True,
                 collapse_whitespace: bool = True) -> None:
        if normalization not in (None, "NFC", "NFKC", "NFD", "NFKD"):
            raise ValueError(f"normalization must be NFC, NFKC, NFD, NFKD or null, got {normalization!r}")
        super().__init__(normalization=normalization, fix_unicode=fix_unicode,
                         collapse_whitespace=collapse_whitespace)

    def apply(self, doc: Document) -> Document | str:
        text = doc.text
        if self.params["fix_unicode"]:
            fixed = fix_text(text)
            self.counters["changed:ftfy"] += fixed != text
            text = fixed
        if self.params["normalization"]:
            normal = unicodedata.normalize(self.params["normalization"], text)
            self.counters["changed:normalize"] += normal != text
            text = normal
        if self.params["collapse_whitespace"]:
            tidy = _BLANK_LINES.sub("\n\n", _SPACES.sub(" ", _CONTROL.sub("", text)))
            tidy = "\n".join(line.strip() for line in tidy.split("\n")).strip()
            self.counters["changed:whitespace"] += tidy != text
            text = tidy
        if not text.strip():
            return "empty"
        doc.text = text
        return doc
