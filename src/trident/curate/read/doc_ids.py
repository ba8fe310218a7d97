"""Document ids as the read phase gives them: each source's own address, made unique where it repeats.

  WARC record    its WARC-Target-URI; where that URI came before, `URI RECORD-ID` (the record's
                 WARC-Record-ID, e.g. `http://a.example/ <urn:uuid:...>` without the brackets)
  HTML file      its name: the path under the folder or pattern it was found under (read/inputs.py)
  JSONL record   its own `id`; where that id came before, `NAME:ID` (NAME: the file's name); a record
                 without one, `NAME:LINE`
and, should even that repeat, the form with the file and position appended (`... @ NAME byte N` /
`... @ NAME line N`), which nothing else shares. A read task (a group of small files, or one large
file) hands out ids unique among its documents; where a run has several read tasks and a WARC or
JSONL input (HTML files' names are unique in the run already), each records what it handed out
(`Claims`) and read/run_ids.py qualifies, after the read phase, an id that an earlier task handed
out too, by the same forms (`alternates`): ids are unique in the run and stable across reruns
(docs/curation.md).
"""
from __future__ import annotations

import json
from array import array
from pathlib import Path

import xxhash

from trident.text.storage import location, save_array


class Claims:
    """What one read task handed out, in order: each id, the document's place in its file (JSONL
    line, WARC byte offset; -1 for an HTML file), the file (`names`; `starts`: the claim at which
    each file's documents begin) and WARC record ids: enough to name it otherwise (`alternates`)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.places = array("q")
        self.records: dict[int, str] = {}  # claim index -> WARC-Record-ID (WARC records that have one)
        self.names: list[str] = []
        self.starts: list[tuple[int, int]] = []  # (first claim, index into names), in claim order
        self._index: dict[str, int] = {}

    def enter(self, name: str) -> None:
        """The documents claimed from now on are those of the file `name` (its name in the run)."""
        if name not in self._index:
            self._index[name] = len(self.names)
            self.names.append(name)
        self.starts.append((len(self.ids), self._index[name]))

    def files(self):
        """Each claim's file (an index into `names`), as a numpy array."""
        import numpy as np

        bounds = [start for start, _ in self.starts] + [len(self.ids)]
        return np.repeat(np.array([index for _, index in self.starts], np.uint32), np.diff(bounds))


class DocumentIds:
    """The ids handed out so far by one read task; `claim` returns the first free candidate. With
    `record`, every id handed out is also noted in `claims` (a run of several read tasks)."""

    def __init__(self, record: bool = False) -> None:
        self._taken: set[str] = set()
        self.claims = Claims() if record else None
        # bound appends: a JSONL record's quick path pays two calls for its claim, no more
        self._note = (self.claims.ids.append, self.claims.places.append) if record else None

    def claim(self, *candidates: str, place: int = -1, record: str = "") -> str:
        """The first candidate not taken yet (taking it); the last one is unique by construction
        (it names the file and position), so it is taken even if it were not."""
        chosen = next((c for c in candidates[:-1] if c not in self._taken), candidates[-1])
        self._taken.add(chosen)
        if self._note is not None:
            if record:
                self.claims.records[len(self.claims.ids)] = record
            self._note[0](chosen)
            self._note[1](place)
        return chosen

    def first(self, candidate: str, place: int = -1) -> bool:
        """Take `candidate` if it is free; whether it was (the quick path of a JSONL record)."""
        if candidate in self._taken:
            return False
        self._taken.add(candidate)
        if self._note is not None:
            self._note[0](candidate)
            self._note[1](place)
        return True


def warc_candidates(uri: str, record_id: str, name: str, offset: int) -> tuple[str, ...]:
    """A WARC record's ids, in order of preference (a record without a URI: its record id)."""
    place = f"{name} byte {offset}"
    if not uri:
        return (record_id, f"{record_id} @ {place}") if record_id else (place,)
    return (uri, *((f"{uri} {record_id}",) if record_id else ()), f"{uri} @ {place}")


def jsonl_candidates(own: str | None, name: str, line: int) -> tuple[str, ...]:
    """A JSONL record's ids, from its own `id` field (None: it has none), in order of preference."""
    if own is None:
        plain = f"{name}:{line}"
        return plain, f"{plain} @ {name} line {line}"
    return own, f"{name}:{own}", f"{own} @ {name} line {line}"


def alternates(doc_id: str, kind: str, name: str, place: int, record: str = "") -> tuple[str, ...]:
    """The ids a document named `doc_id` by a read task takes instead, in order, when an earlier task
    of the run handed out `doc_id` too (kind: 'warc', 'jsonl' or 'html'): for an id in its first form
    (a URI, a JSONL record's own id) the forms a repeat within one task takes; the last names the
    file and position, which no other document shares."""
    if kind == "warc":
        return (*((f"{doc_id} {record}",) if record else ()), f"{doc_id} @ {name} byte {place}")
    if kind == "jsonl":
        return f"{name}:{doc_id}", f"{doc_id} @ {name} line {place}"
    return (f"{doc_id} @ file",)


class Naming:
    """The ids of one input file's documents: its name in the run and the read task's ids so far."""

    __slots__ = ("name", "ids")

    def __init__(self, name: str, ids: DocumentIds | None) -> None:
        self.name, self.ids = name, ids
        if ids is not None and ids.claims is not None:
            ids.claims.enter(name)

    def file(self) -> str:
        """An HTML file's document: its name (unique in the run)."""
        return self.ids.claim(self.name, f"{self.name} @ file") if self.ids is not None else self.name

    def jsonl(self, own: str | None, line: int) -> str:
        if self.ids is None:
            return own if own is not None else f"{self.name}:{line}"
        if own is not None and self.ids.first(own, line):  # the usual case, quickly
            return own
        candidates = jsonl_candidates(own, self.name, line)
        return self.ids.claim(*(candidates[1:] if own is not None else candidates), place=line)

    def warc(self, uri: str, record_id: str, offset: int) -> str:
        candidates = warc_candidates(uri, record_id, self.name, offset)
        if self.ids is None:
            return candidates[0]
        return self.ids.claim(*candidates, place=offset, record=record_id)


CLAIMS_SUFFIX = ".ids.npz"


def claims_path(output: str | Path) -> Path:
    """Where a read task's claims are kept: beside its shard (shard-00003.jsonl.zst -> shard-00003.ids.npz)."""
    shard = location(output)
    return shard.with_name(shard.name.removesuffix(".zst").removesuffix(".jsonl") + CLAIMS_SUFFIX)


def id_hash(doc_id: str) -> int:
    """The 64-bit hash by which the ids of a run's read tasks are compared (read/run_ids.py)."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8", "surrogatepass"))


def save_claims(output: str | Path, claims: Claims) -> None:
    """Write a read task's `claims` beside its shard `output`: the ids' hashes, files and places, and
    (as JSON) the files' names, the ids and the WARC record ids. Never pickled."""
    import numpy as np

    detail = json.dumps({"names": claims.names, "ids": claims.ids, "records": claims.records}, ensure_ascii=False)
    save_array(claims_path(output), None,
               hashes=np.fromiter(map(id_hash, claims.ids), np.uint64, len(claims.ids)),
               places=np.frombuffer(claims.places, np.int64), files=claims.files(),
               detail=np.frombuffer(detail.encode("utf-8", "surrogatepass"), np.uint8))
