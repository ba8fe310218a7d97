"""Unicode repair (ftfy) and normalisation of document text."""
from __future__ import annotations

import re
import unicodedata

from trident.curate.document import Document
from trident.curate.extract.unicode_fix import fix_text
from trident.curate.stage import StreamingStage, register_stage

# C0/C1 control characters except tab and newline go (they carry no text and confuse tokenizers), and
# other space characters become " ", in one pass (the two sets are disjoint); then runs of " " become
# one, a pass that sre scans fast by its literal prefix (a pattern of runs tried a match at every space)
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\xa0\u2000-\u200b\u3000]")
_OTHER_SPACES = frozenset("\t\u00a0\u3000" + "".join(map(chr, range(0x2000, 0x200c))))
_SPACE_RUNS = re.compile("  +")
_BLANK_LINES = re.compile(r"\n\s*\n(\s*\n)+")


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
            tidy = _BLANK_LINES.sub("\n\n", _SPACE_RUNS.sub(" ", _CONTROL_OR_SPACE.sub(_space_or_nothing, text)))
            tidy = "\n".join(line.strip() for line in tidy.split("\n")).strip()
            self.counters["changed:whitespace"] += tidy != text
            text = tidy
        if not text.strip():
            return "empty"
        doc.text = text
        return doc


def _space_or_nothing(match: re.Match) -> str:
    return " " if match.group() in _OTHER_SPACES else ""
