"""Document ids as the read phase gives them: each source's own address, made unique where it repeats.

  WARC record    its WARC-Target-URI; where that URI came before, `URI RECORD-ID` (the record's
                 WARC-Record-ID, e.g. `http://a.example/ <urn:uuid:...>` without the brackets)
  HTML file      its name: the path under the folder or pattern it was found under (read/inputs.py)
  JSONL record   its own `id`; where that id came before, `NAME:ID` (NAME: the file's name); a record
                 without one, `NAME:LINE`
and, should even that repeat, the form with the file and position appended (`... @ NAME byte N` /
`... @ NAME line N`), which nothing else shares. Ids are unique among the documents one read task
reads (a group of small files, or one large file) and stable across reruns of the same inputs;
HTML file names are unique in the whole run. A URI or JSONL id repeated in two files read by
different tasks keeps its bare form in both (docs/curation.md).
"""
from __future__ import annotations


class DocumentIds:
    """The ids handed out so far by one read task; `claim` returns the first free candidate."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def claim(self, *candidates: str) -> str:
        """The first candidate not taken yet (taking it); the last one is unique by construction
        (it names the file and position), so it is taken even if it were not."""
        for candidate in candidates[:-1]:
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate
        self._taken.add(candidates[-1])
        return candidates[-1]

    def first(self, candidate: str) -> bool:
        """Take `candidate` if it is free; whether it was (the quick path of a JSONL record)."""
        if candidate in self._taken:
            return False
        self._taken.add(candidate)
        return True


def warc_id(ids: DocumentIds | None, uri: str, record_id: str, name: str, offset: int) -> str:
    """A WARC record's id (a record without a URI: its record id)."""
    place = f"{name} byte {offset}"
    if ids is None:
        return uri or record_id or place
    if not uri:
        return ids.claim(*filter(None, (record_id,)), f"{record_id} @ {place}" if record_id else place)
    return ids.claim(uri, *((f"{uri} {record_id}",) if record_id else ()), f"{uri} @ {place}")


def jsonl_id(ids: DocumentIds | None, own: str | None, name: str, line: int, taken: bool = False) -> str:
    """A JSONL record's id, from its own `id` field (None: it has none; `taken`: known to be taken)."""
    if own is None:
        plain = f"{name}:{line}"
        return ids.claim(plain, f"{plain} @ {name} line {line}") if ids is not None else plain
    if ids is None:
        return own
    return ids.claim(*(() if taken else (own,)), f"{name}:{own}", f"{own} @ {name} line {line}")


class Naming:
    """The ids of one input file's documents: its name in the run and the read task's ids so far."""

    __slots__ = ("name", "ids")

    def __init__(self, name: str, ids: DocumentIds | None) -> None:
        self.name, self.ids = name, ids

    def file(self) -> str:
        """An HTML file's document: its name (unique in the run)."""
        return self.ids.claim(self.name, f"{self.name} @ file") if self.ids is not None else self.name

    def jsonl(self, own: str | None, line: int) -> str:
        if own is not None and self.ids is not None and self.ids.first(own):  # the usual case, quickly
            return own
        return jsonl_id(self.ids, own, self.name, line, taken=own is not None)

    def warc(self, uri: str, record_id: str, offset: int) -> str:
        return warc_id(self.ids, uri, record_id, self.name, offset)
