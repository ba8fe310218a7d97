"""An HTML page's bytes as text: its declared charset, else UTF-8, else UTF-8 with the undecodable
bytes replaced and reported. (Apart from warc.py: a folder of HTML files need not import warcio,
~0.07 s with the fsspec it imports.)"""
from __future__ import annotations

from pathlib import Path

from trident.curate.read.record_log import RecordLog


def decode_html(body: bytes, content_type: str, path: Path, where: str, log: RecordLog) -> str:
    """Declared charset, else UTF-8; undecodable bytes are replaced and reported (kept, counted)."""
    charset = None
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip("\"' ")
    for encoding in filter(None, (charset, "utf-8")):
        try:
            return body.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
    log.bad(path, where, "invalid_utf8", "undecodable bytes replaced with U+FFFD", dropped=False)
    return body.decode("utf-8", errors="replace")
