"""JSONL corpora -> one Megatron indexed dataset, encoded by a pool of worker processes.

The main process reads raw lines (decompressing .gz/.zst) and hands chunks of them to helper
processes, which decode, parse and encode them, encoding chunks itself while the helpers are busy
(N workers: this process and N - 1 helpers); results are taken in input order, so the output does
not depend on the number of workers. Each worker encodes on one core (Rust's batch threads off, in the
pool and in-process alike), and a chunk's tokens come back as one array, which the main process
writes in one call: its share of the work stays small, so two workers are nearly
twice one. Each document gets EOD appended (Megatron's --append-eod).
A bad line is counted by reason and reported as FILE:LINE; so is a line over max_doc_bytes (read
in bounded pieces, never held whole) and a compressed file that breaks off (its earlier lines are
kept, the next file is read). With strict=True the first one stops the run (and no output is left behind).
"""
from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from collections import Counter, deque
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from trident.data.indexed import IndexedDatasetBuilder, best_dtype
from trident.data.lineage import DocumentLines
from trident.data.tokenizer import Tokenizer
from trident.text.damage import BROKEN_OFF, is_damage
from trident.text.jsonl import (DEFAULT_MAX_DOC_BYTES, LineResult, UnreadableFile, is_jsonl,
                                iter_raw_lines, parse_line)
from trident.text.storage import location, staged_prefix
from trident.text.progress import progress_bar

log = logging.getLogger("trident.data")
CHUNK_LINES = 256
CHUNK_BYTES = 4 << 20
# listed even at 0; the rarer reasons (invalid_unicode, too_large, unreadable_file) appear once seen
_LISTED = ("blank", "invalid_utf8", "malformed_json", "missing_field", "empty_text")
MAX_EXAMPLES = 20  # bad lines listed by name in the stats; all are counted


class TokenizeError(ValueError):
    """A bad input line in strict mode; the message names file and line."""


_worker: dict = {}


def _load_encoder(tokenizer_path: str, json_key: str) -> None:
    _worker["tokenizer"] = Tokenizer.load(tokenizer_path)
    _worker["key"] = json_key


def _init_worker(tokenizer_path: str, json_key: str) -> None:
    # each worker is one process on one core; Rust-side threads on top would oversubscribe the cores
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _load_encoder(tokenizer_path, json_key)


@contextmanager
def _one_thread_encoding():
    """Rust's batch threads off while one worker encodes in this process: `workers` counts the cores
    used, so that one worker is one core and two workers can be twice as fast."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read by tokenizers at every batch call
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def _encode_chunk(chunk: tuple[str, list[tuple[int, bytes | LineResult]]]) -> tuple[np.ndarray, list]:
    """(tokens, entries): tokens holds every non-empty document's ids followed by EOD, one int32
    array for the chunk (one buffer to pickle and to write); entries, in the chunk's
    order, is (line, tokens with EOD, identity) per good line (0 tokens: empty text) and the
    LineResult of every bad one."""
    path, lines = chunk
    tokenizer, key = _worker["tokenizer"], _worker["key"]
    # the reader already judged some lines (too_large, unreadable_file): those pass through
    parsed = [raw if isinstance(raw, LineResult) else parse_line(path, number, raw, key) for number, raw in lines]
    good = [p for p in parsed if p.text is not None]
    encoded = tokenizer.encode_batch([p.text for p in good])
    eod = [tokenizer.eod_id]
    # int32 halves what crosses the process boundary; every vocabulary id fits
    pieces = [np.asarray(ids + eod, dtype=np.int32) for ids in encoded if ids]
    tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
    counts = iter([len(ids) + 1 if ids else 0 for ids in encoded])
    return tokens, [(p.line, next(counts), _identity(p.value)) if p.text is not None else p for p in parsed]


def _identity(value: dict) -> dict | None:
    """A record's own id and URL (curation's output carries both), for the lineage sidecar."""
    found = {k: value[k] for k in ("id", "url") if isinstance(value.get(k), str)}
    return found or None


def _read(path: Path, max_doc_bytes: int | None) -> Iterator[tuple[int, bytes | LineResult]]:
    """(line, bytes) per line; a LineResult for a line over the cap and for where the file breaks off."""
    name = str(path)
    try:
        for number, raw, size in iter_raw_lines(path, max_doc_bytes):
            yield number, raw if raw is not None else LineResult(
                name, number, reason="too_large", detail=f"{size} bytes, over --max-doc-bytes {max_doc_bytes}")
    except UnreadableFile as err:
        # everything before the damage was delivered; the rest of this file is one counted loss
        yield err.line, LineResult(name, err.line, reason="unreadable_file", detail=err.detail)


def _chunks(inputs: list[Path], max_doc_bytes: int | None) -> Iterator[tuple[str, list]]:
    for path in inputs:
        lines, size = [], 0
        for number, raw in _read(path, max_doc_bytes):
            lines.append((number, raw))
            size += len(raw) if isinstance(raw, bytes) else 0
            if len(lines) >= CHUNK_LINES or size >= CHUNK_BYTES:
                yield str(path), lines
                lines, size = [], 0
        if lines:
            yield str(path), lines


def _encoded(inputs, tokenizer_path: str, json_key: str, workers: int, max_doc_bytes: int | None) -> Iterator[tuple]:
    """(input path, encoded chunk) in input order; at most a few chunks per worker in flight.
    With N workers this process is one of them: it encodes a chunk itself whenever the N - 1 helper
    processes have two each queued, so N workers cost N interpreter starts and tokenizer loads, as
    N separate runs would, not N + 1."""
    _load_encoder(tokenizer_path, json_key)
    if workers <= 1:
        with _one_thread_encoding():
            for chunk in _chunks(inputs, max_doc_bytes):
                yield chunk[0], _encode_chunk(chunk)
        return
    # spawn: a fork would inherit the parent's tokenizer thread pool (and torch), which can deadlock
    context = multiprocessing.get_context("spawn")
    helpers = workers - 1
    with context.Pool(helpers, initializer=_init_worker, initargs=(tokenizer_path, json_key)) as pool, \
            _one_thread_encoding():
        pending: deque = deque()  # (path, AsyncResult or this process's finished result), in input order
        for chunk in _chunks(inputs, max_doc_bytes):
            queued = sum(1 for _, work in pending if not _finished(work))
            if queued < 2 * helpers:
                pending.append((chunk[0], pool.apply_async(_encode_chunk, (chunk,))))
            else:
                pending.append((chunk[0], _encode_chunk(chunk)))
            while pending and (_finished(pending[0][1]) or len(pending) >= 4 * workers):
                path, work = pending.popleft()
                yield path, _result(work)
        while pending:
            path, work = pending.popleft()
            yield path, _result(work)


def _finished(work) -> bool:
    """Whether a pending entry is done: this process's own result (a tuple) or a ready AsyncResult."""
    return isinstance(work, tuple) or work.ready()


def _result(work) -> tuple:
    return work if isinstance(work, tuple) else work.get()


def _check_inputs(inputs) -> list[Path]:
    paths = [location(p) for p in inputs]
    if not paths:
        raise ValueError("no input files given")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: input file not found")
        if not is_jsonl(path):
            raise ValueError(f"{path}: expected .jsonl, .jsonl.gz or .jsonl.zst (one JSON object a line)")
    return paths


class _BadLines:
    """Where skipped lines go: OUTPUT_PREFIX.bad_lines.jsonl (opened at the first one, so a clean run
    leaves no empty log behind) and the first few as warnings; strict mode raises instead."""

    def __init__(self, prefix: Path, strict: bool):
        self.path, self.strict = Path(f"{prefix}.bad_lines.jsonl"), strict
        self.path.unlink(missing_ok=True)  # a stale log from an earlier run would mislead
        self.handle = None
        self.examples: list[str] = []

    def add(self, result) -> None:
        if self.strict:
            raise TokenizeError(f"{result.describe()} (strict mode; drop --strict to skip and count bad lines)")
        if self.handle is None:
            self.handle = open(self.path, "w", encoding="utf-8")
        self.handle.write(json.dumps({"file": result.path, "line": result.line, "reason": result.reason,
                                      "detail": result.detail}) + "\n")
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(result.describe())
            log.warning("skipping %s", result.describe())

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def tokenize_files(inputs, output_prefix, tokenizer_path, json_key: str = "text", workers: int = 1,
                   strict: bool = False, progress: bool = True,
                   max_doc_bytes: int | None = DEFAULT_MAX_DOC_BYTES) -> dict:
    """Encode the `json_key` field of every JSONL line into OUTPUT_PREFIX.bin/.idx.

    Returns the run's statistics, also written to OUTPUT_PREFIX.stats.json: documents, tokens,
    `dropped` (count by reason: blank, empty_text, invalid_utf8, malformed_json, missing_field,
    invalid_unicode, too_large (over `max_doc_bytes`), unreadable_file (where a file broke off)),
    `bad_lines` (the first few as FILE:LINE: reason; all of them in OUTPUT_PREFIX.bad_lines.jsonl),
    `damaged_files` ({file: {reason: lines, "lines_before": N where it broke off}}, all of them),
    `tokenizer_sha256`, `vocab_size` and `max_token_id` (checked against the model at train start),
    timings (`seconds`, and `main_process_cpu_s`: this process's CPU, the part workers do not share). strict=True raises TokenizeError on the first bad line or unreadable file.
    """
    paths = _check_inputs(inputs)
    if max_doc_bytes is not None and max_doc_bytes < 1:
        raise ValueError(f"max_doc_bytes must be positive, got {max_doc_bytes}")
    tokenizer = Tokenizer.load(tokenizer_path)
    with staged_prefix(output_prefix, commit_suffix=".idx") as prefix:  # an s3:// prefix is uploaded at the end
        return _tokenize(paths, prefix, str(output_prefix), tokenizer, json_key, workers, strict, progress,
                         max_doc_bytes)


def _tokenize(paths, prefix: Path, target: str, tokenizer, json_key, workers, strict, progress, max_doc_bytes) -> dict:
    """tokenize_files writing PREFIX.* locally, named for `target` in its statistics."""
    builder = IndexedDatasetBuilder(prefix, best_dtype(tokenizer.vocab_size))
    dropped: Counter = Counter({reason: 0 for reason in _LISTED})
    damaged: dict = {}
    bad = _BadLines(prefix, strict)
    lines, max_id = 0, -1
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = progress_bar(desc=f"tokenize -> {location(target).name}", unit=" docs", enabled=progress, mininterval=0.5)
    lineage = DocumentLines(prefix, paths)
    try:
        for path, (tokens, entries) in _encoded(paths, str(tokenizer.source), json_key, max(1, int(workers)),
                                                max_doc_bytes):
            sizes = []
            for entry in entries:
                lines += 1
                if not isinstance(entry, tuple):
                    dropped[entry.reason] += 1
                    if entry.reason != "blank":
                        bad.add(entry)
                    _note_damage(damaged, entry)
                elif entry[1] == 0:
                    dropped["empty_text"] += 1
                else:
                    sizes.append(entry[1])
                    lineage.add(path, entry[0], entry[2])
            if sizes:
                max_id = max(max_id, int(tokens.max()))  # EOD included: the result counts it anyway
                builder.add_documents(tokens, sizes)
            bar.update(len(entries))
        builder.finalize()
        lineage.save()
    except BaseException:
        builder.abort()
        raise
    finally:
        bar.close()
        bad.close()
    stats = _stats(paths, target, tokenizer, json_key, builder, lines, dropped, bad, workers,
                   time.perf_counter() - start)
    stats["damaged_files"] = damaged  # {file: {reason: lines, "lines_before": N}}: damage_summary prints it
    # the reading and writing process's own CPU: with workers, what bounds their scaling
    stats["main_process_cpu_s"] = round(time.process_time() - cpu_start, 3)
    # what training checks the model against: which tokenizer, and the largest id actually present
    stats |= {"tokenizer_sha256": tokenizer.sha256(), "tokenizer_fingerprint": tokenizer.fingerprint(),
              "max_token_id": max(max_id, tokenizer.eod_id) if builder.num_documents else None}
    Path(f"{prefix}.stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def _note_damage(damaged: dict, result: LineResult) -> None:
    """Count a damaged line under its file; where a file broke off, the lines read before it."""
    if is_damage(result.reason):
        entry = damaged.setdefault(result.path, {})
        entry[result.reason] = entry.get(result.reason, 0) + 1
        if result.reason == "unreadable_file":
            entry[BROKEN_OFF] = result.line - 1


def _stats(paths, target: str, tokenizer, json_key: str, builder, lines: int, dropped: Counter, bad: _BadLines,
           workers: int, seconds: float) -> dict:
    return {
        "inputs": [str(p) for p in paths],
        "output_prefix": target,
        "tokenizer": str(tokenizer.source),
        "json_key": json_key,
        "vocab_size": tokenizer.vocab_size,
        "dtype": np.dtype(builder.dtype).name,
        "lines": lines,
        "documents": builder.num_documents,
        "tokens": builder.num_tokens,
        "dropped": dict(dropped),
        "bad_lines_total": sum(n for r, n in dropped.items() if r not in ("blank", "empty_text")),
        "bad_lines": bad.examples,
        "bad_lines_file": f"{target}.bad_lines.jsonl" if bad.handle is not None else None,
        "workers": max(1, int(workers)),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(builder.num_tokens / seconds, 1) if seconds > 0 else None,
    }
