"""Downstream-task decontamination: cut evaluation-set n-grams out of training documents.

The rule (GPT-3 appendix C, MT-NLG section 3.1), exactly as implemented here:
- Words are the regex ``\\w+`` matches of a text, lower-cased; punctuation and spacing are ignored
  (trident.text.ngrams hashes them and their n-grams).
- Task texts: every string value (and string inside a list) of each evaluation record, joined
  with newlines, one text per record. A task text of L words contributes all its n-grams with
  ``n = min(ngram, L)`` (13 by default); a text of fewer than ``min_ngram`` (8) words is too
  short to match safely and is skipped (counted ``task_texts_too_short``).
- Frequent n-grams: an index n-gram that occurs in >= ``frequent_docs`` (10) training documents
  of the stage's input is common language, not leaked test data, and is ignored. With ``copy_share``
  or ``copy_ngrams`` (0: off, the papers' rule), a training document holding at least that share of
  one task text's distinct n-grams, or that many of them, is a copy of that text: its n-grams of the
  text are not counted, so a text copied however often is still cut, while a phrase many different
  documents share (a licence line) stays common (``copies_of_task_texts`` counts such documents).
- Cutting: for each remaining match at characters [s, e) the cut runs from ``s - cut_chars``
  back to just after the previous ".", "!", "?" or newline (or to the start of the text), and
  from ``e + cut_chars`` forward to just after the next one (or to the end). Overlapping cuts
  merge; each merged cut counts as one split.
- A document with more than ``max_splits`` (10) splits is dropped (``dropped:too_many_splits``).
  Otherwise the pieces between cuts are stripped; pieces under ``min_piece_chars`` (200) are
  dropped (``pieces_dropped``) and the rest are joined by a blank line into one document (so one
  document in is at most one out). No piece left: ``dropped:contaminated``.
Counters ``touched:<task>`` count the training documents each task's n-grams matched, ``cuts`` the
merged cuts (spans removed) in them.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from trident.curate.document import CurateError, Document
from trident.curate.droplog import DropLog, log_path
from trident.curate.read.shards import LEVEL, output_level, read_shard, write_shard
from trident.curate.stage import Executor, GlobalStage, output_paths, register_stage
from trident.tasks import TaskDataError, get_task
from trident.text.jsonl import DEFAULT_MAX_DOC_BYTES, UnreadableFile, iter_jsonl, iter_raw_lines
from trident.text.ngrams import ngram_hashes, word_hashes, word_spans, words_of
from trident.text.storage import load_array, location, make_folder, remove_tree, save_array

_BOUNDARY = frozenset(".!?\n")


# ---- evaluation tasks ------------------------------------------------------------------------

def record_text(record: Any) -> str:
    """All string values of a record (and strings inside lists), in key order, one a line."""
    if isinstance(record, str):
        return record
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object or string, got {type(record).__name__}")
    parts: list[str] = []
    for value in record.values():
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(v for v in value if isinstance(v, str))
    return "\n".join(parts)


def _text_lines(path: Path) -> Iterator[str]:
    """Each non-blank line of a .txt[.gz] file."""
    for number, raw, size in iter_raw_lines(path, DEFAULT_MAX_DOC_BYTES):
        if raw is None:
            raise CurateError(f"decontaminate: {path}:{number}: line of {size} bytes, over the limit of "
                              f"{DEFAULT_MAX_DOC_BYTES}")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CurateError(f"decontaminate: {path}:{number}: not UTF-8 ({err})") from err
        if line.strip():
            yield line


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of each non-blank line of a .jsonl[.gz] file."""
    for result in iter_jsonl(path, key=None, max_line_bytes=DEFAULT_MAX_DOC_BYTES):
        if result.reason == "blank":
            continue
        if result.reason is not None:
            raise CurateError(f"decontaminate: {result.describe()}")
        yield result.line, result.value


def file_texts(path: Path, fields: list[str] | None = None) -> Iterator[str]:
    """Task texts of a .jsonl[.gz] file (one per record) or .txt[.gz] file (one per non-empty line)."""
    name = path.name.lower()
    if not path.is_file():
        raise CurateError(f"decontaminate: task file {path} not found")
    if not name.endswith((".jsonl", ".jsonl.gz", ".txt", ".txt.gz")):
        raise CurateError(f"decontaminate: task file {path}: expected .jsonl, .jsonl.gz, .txt or .txt.gz")
    try:
        if name.endswith((".txt", ".txt.gz")):
            yield from _text_lines(path)
            return
        for line_no, record in _jsonl_records(path):
            try:
                if fields is not None:
                    missing = [f for f in fields if f not in record]
                    if missing:
                        raise ValueError(f"missing field(s) {missing}")
                    record = {f: record[f] for f in fields}
                yield record_text(record)
            except (ValueError, TypeError) as err:
                raise CurateError(f"decontaminate: {path}:{line_no}: {err}") from err
    except UnreadableFile as err:
        raise CurateError(f"decontaminate: {err}") from err


def harness_texts(name: str, data_dir: str | None) -> Iterator[str]:
    """Validation and test records of an evaluation-harness task (trident.tasks)."""
    try:
        task = get_task(name)
    except KeyError as err:
        raise CurateError(f"decontaminate: harness task {name!r}: {err.args[0]}") from err
    splits = [s for s in dict.fromkeys((task.eval_split, "validation", "test")) if task.split_files(s)]
    root = location(data_dir) if data_dir is not None else None  # task files may be on a store
    found = [s for s in splits if root is not None and task.has_split(root, s)]
    if not found:
        raise CurateError(f"decontaminate: task {name!r}: no validation/test files under data_dir={data_dir!r}; "
                          f"expected {task.expected}")
    for split in found:
        try:
            docs = task.load(root, split)
        except TaskDataError as err:
            raise CurateError(f"decontaminate: task {name!r}: {err}") from err
        for doc in docs:
            yield record_text(doc)


def parse_tasks(tasks: Any) -> list[dict]:
    """Normalise the ``tasks`` parameter to [{"name", "paths", "fields", "harness"}].

    Accepted forms: {name: path | [paths]} or a list of {name, path | paths, fields?} or
    {name, harness: true} (load with the evaluation harness's reader from ``data_dir``).
    """
    if isinstance(tasks, dict):
        tasks = [{"name": k, "paths": v if isinstance(v, list) else [v]} for k, v in tasks.items()]
    if not isinstance(tasks, list) or not tasks:
        raise ValueError("tasks must be a non-empty mapping {name: path} or list of {name, path}")
    out = []
    for i, spec in enumerate(tasks):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ValueError(f"tasks[{i}] must be a mapping with a string 'name', got {spec!r}")
        unknown = set(spec) - {"name", "path", "paths", "fields", "harness"}
        if unknown:
            raise ValueError(f"tasks[{i}] ({spec['name']}): unknown key(s) {sorted(unknown)}")
        fields = spec.get("fields")
        if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
            raise ValueError(f"tasks[{i}] ({spec['name']}): fields must be a list of key names, got {fields!r}")
        paths = spec.get("paths", [spec["path"]] if "path" in spec else [])
        if not isinstance(paths, list):
            raise ValueError(f"tasks[{i}] ({spec['name']}): paths must be a list, got {paths!r}")
        if not paths and not spec.get("harness"):
            raise ValueError(f"tasks[{i}] ({spec['name']}): give 'path', 'paths' or 'harness: true'")
        out.append({"name": spec["name"], "paths": [str(p) for p in paths],
                    "fields": spec.get("fields"), "harness": bool(spec.get("harness", False))})
    return out


# ---- the n-gram index ------------------------------------------------------------------------

def build_index(tasks: list[dict], data_dir: str | None, ngram: int, min_ngram: int,
                counters: Counter) -> dict[str, np.ndarray]:
    """Over every task text: sorted n-gram `hashes`, the text holding each (`owners`), each text's task
    (`text_task`) and count of distinct n-grams (`text_grams`), and the n-gram `sizes` used."""
    hashes, owners, sizes, text_task = [], [], set(), []
    for task_id, task in enumerate(tasks):
        texts = harness_texts(task["name"], data_dir) if task["harness"] else (
            text for p in task["paths"] for text in file_texts(location(p), task["fields"]))
        for text in texts:
            counters["task_texts"] += 1
            words = words_of(text)
            if len(words) < min_ngram:
                counters["task_texts_too_short"] += 1
                continue
            n = min(ngram, len(words))
            sizes.add(n)
            grams = ngram_hashes(word_hashes(words), n)
            hashes.append(grams)
            owners.append(np.full(len(grams), len(text_task), dtype=np.int64))
            text_task.append(task_id)
    pairs = np.unique(np.stack([np.concatenate(hashes or [np.zeros(0, np.uint64)]),
                                np.concatenate(owners or [np.zeros(0, np.int64)]).astype(np.uint64)], 1), axis=0)
    return {"hashes": pairs[:, 0].copy(), "owners": pairs[:, 1].astype(np.int64),
            "text_task": np.array(text_task, dtype=np.int64), "sizes": np.array(sorted(sizes), dtype=np.int64),
            "text_grams": np.bincount(pairs[:, 1].astype(np.int64), minlength=len(text_task))}


INDEX_ARRAYS = ("hashes", "owners", "text_task", "sizes", "text_grams")


def copied_texts(matches: list[tuple[int, int, int, int]], text_grams: np.ndarray, rule: dict) -> set[int]:
    """The task texts a document is a copy of: it holds >= copy_share of a text's distinct n-grams, or
    >= copy_ngrams of them (each 0: not judged so)."""
    held: dict[int, set[int]] = {}
    for _, _, gram, text in matches:
        held.setdefault(text, set()).add(gram)
    share, least = rule["copy_share"], rule["copy_ngrams"]
    return {text for text, grams in held.items()
            if (share and len(grams) >= share * text_grams[text]) or (least and len(grams) >= least)}


class IndexLookup:
    """Finds index n-grams in a text: for each n in ``sizes``, a sorted array lookup."""

    def __init__(self, index: dict[str, np.ndarray]) -> None:
        self.hashes, self.owners, self.sizes = index["hashes"], index["owners"], index["sizes"].tolist()
        self.text_task, self.text_grams = index["text_task"], index["text_grams"]

    @classmethod
    def load(cls, path: Path) -> "IndexLookup":
        with load_array(path) as data:
            return cls({name: data[name] for name in INDEX_ARRAYS})

    def matches(self, text: str) -> list[tuple[int, int, int, int]]:
        """(start char, end char, n-gram hash, task text id) of every index n-gram in ``text``."""
        if len(self.hashes) == 0:
            return []
        words = words_of(text)
        if not words:
            return []
        wh = word_hashes(words)
        found: list[tuple[int, int, int, int]] = []
        starts = ends = None
        for n in self.sizes:
            grams = ngram_hashes(wh, n)
            pos = np.searchsorted(self.hashes, grams)
            hit = np.flatnonzero(self.hashes[np.minimum(pos, len(self.hashes) - 1)] == grams)
            if len(hit) and starts is None:
                starts, ends = word_spans(text)  # offsets only for texts that match
            for i in hit.tolist():
                j = int(pos[i])
                while j < len(self.hashes) and self.hashes[j] == grams[i]:  # one n-gram, many tasks
                    found.append((int(starts[i]), int(ends[i + n - 1]), int(grams[i]), int(self.owners[j])))
                    j += 1
        return found


# ---- cutting ---------------------------------------------------------------------------------

def cut_regions(text: str, spans: list[tuple[int, int]], cut_chars: int) -> list[tuple[int, int]]:
    """Merged [start, end) character ranges to remove for the matched spans (rule in module doc)."""
    regions = []
    for start, end in spans:
        # str.rfind/find per boundary character: C-speed scans even in long unpunctuated text.
        pos = start - cut_chars
        before = max(text.rfind(c, 0, pos + 1) for c in _BOUNDARY) if pos > 0 else -1
        left = before + 1 if before > 0 else 0
        pos = end + cut_chars
        after = [i for i in (text.find(c, pos) for c in _BOUNDARY) if i >= 0] if pos < len(text) else []
        regions.append((left, min(after) + 1 if after else len(text)))
    merged: list[tuple[int, int]] = []
    for left, right in sorted(regions):
        if merged and left <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], right))
        else:
            merged.append((left, right))
    return merged


def remaining_pieces(text: str, regions: list[tuple[int, int]]) -> list[str]:
    """The stripped, non-empty text between (and around) the removed regions."""
    pieces, pos = [], 0
    for left, right in regions + [(len(text), len(text))]:
        piece = text[pos:left].strip()
        if piece:
            pieces.append(piece)
        pos = right
    return pieces


def clean_document(doc: Document, lookup: IndexLookup, rule: dict, tasks: list[str],
                   counters: Counter) -> Document | str:
    """The document with task n-grams cut out, or the reason it is dropped (rule in module doc)."""
    matches = lookup.matches(doc.text)
    if not matches:
        return doc
    for task_id in sorted({int(lookup.text_task[m[3]]) for m in matches}):
        counters[f"touched:{tasks[task_id]}"] += 1
    regions = cut_regions(doc.text, sorted({(m[0], m[1]) for m in matches}), rule["cut_chars"])
    counters["cuts"] += len(regions)  # spans removed (of dropped documents too): what a flow's report counts
    if len(regions) > rule["max_splits"]:
        return "too_many_splits"
    pieces = remaining_pieces(doc.text, regions)
    kept = [p for p in pieces if len(p) >= rule["min_piece_chars"]]
    counters["pieces_dropped"] += len(pieces) - len(kept)
    if not kept:
        return "contaminated"
    counters["documents_cleaned"] += 1
    return Document(doc.id, "\n\n".join(kept), {**doc.meta, "decontaminated_cuts": len(regions)})


def _count_task(job: dict) -> tuple[np.ndarray, np.ndarray, list[int], int]:
    """Pass 1: (index n-gram hashes, how many of this shard's documents contain each outside a copy of
    a task text holding it, the rows that contain any: pass 2 rescans only those, and how many
    documents copy a task text)."""
    lookup = IndexLookup.load(location(job["index"]))
    seen: Counter = Counter()
    rows, copies = [], 0
    for row, doc in enumerate(read_shard(location(job["path"]))):
        matches = lookup.matches(doc.text)
        if matches:
            copied = copied_texts(matches, lookup.text_grams, job["rule"])
            copies += bool(copied)
            in_copies = {m[2] for m in matches if m[3] in copied}
            seen.update({m[2] for m in matches} - in_copies)
            rows.append(row)
    return np.array(list(seen), dtype=np.uint64), np.array(list(seen.values()), dtype=np.int64), rows, copies


def _clean_task(job: dict) -> Counter:
    """Pass 2: one shard with the (non-frequent) task n-grams cut out; returns its counters."""
    lookup = IndexLookup.load(location(job["index"]))
    counters: Counter = Counter()

    suspects = set(job["rows"])

    def cleaned(drops: DropLog):
        for row, doc in enumerate(read_shard(location(job["path"]))):
            counters["in"] += 1
            counters["bytes_in"] += doc.nbytes
            # A row with no index n-gram in pass 1 has none of the (smaller) filtered index either.
            result = clean_document(doc, lookup, job["rule"], job["tasks"], counters) if row in suspects else doc
            if isinstance(result, str):
                counters[f"dropped:{result}"] += 1
                drops.add(doc.id, str(doc.meta.get("url", "")), "decontaminate", result)
                continue
            counters["out"] += 1
            counters["bytes_out"] += result.nbytes
            yield result

    with DropLog(log_path(job["out"])) as drops:
        write_shard(location(job["out"]), cleaned(drops), job.get("level", LEVEL))
    return counters


@register_stage("decontaminate")
class Decontaminate(GlobalStage):
    """Remove evaluation-task n-grams (and their surroundings) from training documents."""

    def __init__(self, tasks: Any = None, data_dir: str | None = None, ngram: int = 13, min_ngram: int = 8,
                 cut_chars: int = 200, min_piece_chars: int = 200, max_splits: int = 10,
                 frequent_docs: int = 10, copy_share: float = 0.0, copy_ngrams: int = 0) -> None:
        self.tasks = parse_tasks(tasks)
        numbers = {"ngram": ngram, "min_ngram": min_ngram, "cut_chars": cut_chars, "min_piece_chars": min_piece_chars,
                   "max_splits": max_splits, "frequent_docs": frequent_docs, "copy_ngrams": copy_ngrams}
        for key, value in numbers.items():
            least = 0 if key in ("cut_chars", "min_piece_chars", "max_splits", "copy_ngrams") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{key} must be an integer >= {least}, got {value!r}")
        if min_ngram > ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must not exceed ngram ({ngram})")
        if isinstance(copy_share, bool) or not isinstance(copy_share, (int, float)) or not 0 <= copy_share <= 1:
            raise ValueError(f"copy_share must be a number from 0 to 1, got {copy_share!r}")
        super().__init__(tasks=tasks, data_dir=data_dir, copy_share=copy_share, **numbers)
        self.data_dir = data_dir
        self.rule = {"cut_chars": cut_chars, "min_piece_chars": min_piece_chars, "max_splits": max_splits,
                     "copy_share": copy_share, "copy_ngrams": copy_ngrams}
        self.ngram, self.min_ngram, self.frequent_docs = ngram, min_ngram, frequent_docs

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Build the task index, find frequent n-grams (pass 1), cut matches (pass 2)."""
        out_dir = location(out_dir)
        work = out_dir / "_work_decontaminate"
        remove_tree(work)
        make_folder(work)
        index = build_index(self.tasks, self.data_dir, self.ngram, self.min_ngram, self.counters)
        self.counters["index_ngrams"] += len(np.unique(index["hashes"]))
        save_array(work / "index.npz", None, **index)
        jobs = [{"path": str(p), "index": str(work / "index.npz"), "rule": self.rule} for p in inputs]
        found = executor.map(_count_task, jobs, desc="decontaminate: count") if len(index["hashes"]) else []
        frequent = self._frequent(found)
        self.counters["frequent_ngrams_ignored"] += len(frequent)
        self.counters["copies_of_task_texts"] += sum(f[3] for f in found)
        keep = ~np.isin(index["hashes"], frequent)
        save_array(work / "filtered.npz", None, **{**index, "hashes": index["hashes"][keep],
                                                   "owners": index["owners"][keep]})
        outputs, names = output_paths(inputs, out_dir), [t["name"] for t in self.tasks]
        suspects = [f[2] for f in found] if found else [[] for _ in inputs]
        jobs = [{"path": str(p), "out": str(o), "index": str(work / "filtered.npz"), "rule": self.rule,
                 "level": output_level(self.work_outputs), "tasks": names, "rows": rows}
                for p, o, rows in zip(inputs, outputs, suspects)]
        for counters in executor.map(_clean_task, jobs, desc="decontaminate: cut"):
            self.counters.update(counters)
        for name in names:
            self.counters[f"touched:{name}"] += 0  # every task appears in the report, even at zero
        remove_tree(work)
        return outputs

    def _frequent(self, found: list[tuple[np.ndarray, np.ndarray, list[int], int]]) -> np.ndarray:
        """Index n-grams present in >= frequent_docs training documents (copies of a text holding them aside)."""
        keys = np.concatenate([f[0] for f in found] + [np.zeros(0, dtype=np.uint64)])
        counts = np.concatenate([f[1] for f in found] + [np.zeros(0, dtype=np.int64)])
        unique, inverse = np.unique(keys, return_inverse=True)
        totals = np.bincount(inverse, weights=counts, minlength=len(unique))
        return unique[totals >= self.frequent_docs]
