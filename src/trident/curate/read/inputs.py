"""The input files of a run, from the paths, folders and glob patterns users give, each with its name.

A folder is walked (links followed, each folder once) and its supported files taken; a glob pattern
(`docs/*.html`, `site/**/*.htm`, quoted so the shell left it alone, or from a config or flow file) is
expanded here; every other file found is skipped and counted by its kind (`.gz`, `.png`, `no suffix`),
never an error. A pattern that matches nothing is a config mistake naming it (exit 2); a missing path
or a named file of an unsupported type is refused as before.

A file's name is its path relative to the folder (or the pattern's fixed part) it was found under,
`en-US/index.html`, or its own name when it was given itself; the documents of an HTML file take it as
their id, those of a JSONL file take it to qualify a repeated id. Names are unique within a run: where
two files would share one (two folders each with `index.html`), each takes as many of its parent
folders as make it unique.
"""
from __future__ import annotations

import glob
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trident.config import ConfigError
from trident.curate.document import CurateError
from trident.curate.read.shards import input_format, supported
from trident.text.storage import is_remote, location

_MAGIC = ("*", "?", "[")
NO_SUFFIX = "no suffix"
REPEATED = "repeated"  # a file reached twice (two inputs naming it): read once


class InputPatternError(CurateError, ConfigError):
    """A glob pattern that matches no file: a config mistake, `trident curate` exits 2 on it."""


@dataclass
class InputFiles:
    """What a run reads: (file, dataset) in order, each file's name, and the skipped files by kind."""

    files: list[tuple[Path, str]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # str(file) -> its name
    skipped: Counter = field(default_factory=Counter)


def find_inputs(entries: list[tuple[str, str]]) -> InputFiles:
    """The files of every (path, folder or pattern; dataset) entry, each once, named uniquely."""
    found, seen, wanted = InputFiles(), set(), []
    for given, dataset in entries:
        for file, name, real in _expand(str(given), found.skipped):
            key = str(file) if is_remote(file) else real or os.path.realpath(file)
            if key in seen:
                found.skipped[REPEATED] += 1
                continue
            seen.add(key)
            found.files.append((file, dataset))
            wanted.append((file, name))
    found.names = dict(zip((str(file) for file, _ in wanted), unique_names(wanted)))
    return found


def kind_of(path: Path) -> str:
    """How a skipped file is counted: its last suffix (`.gz`, `.png`), or `no suffix`."""
    return path.suffix.lower() or NO_SUFFIX


def skipped_summary(skipped: dict) -> str:
    """`14 .gz, 3 .png` (most first), or '' when nothing was skipped."""
    return ", ".join(f"{count} {kind}" for kind, count in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))


def _expand(given: str, skipped: Counter) -> list[tuple[Path, str, str | None]]:
    """(file, name, its real path where known) of one entry: a file, a folder's supported files, or a
    pattern's matches."""
    if not is_remote(given) and any(mark in given for mark in _MAGIC):
        root = _fixed_part(given)
        matches = sorted(glob.glob(os.path.expanduser(given), recursive=True))
        if not matches:
            raise InputPatternError(f"input pattern '{given}' matches no file (looked under {root})")
        files = []
        for match in map(Path, matches):
            files += _walk(match, match, skipped) if match.is_dir() else _take(match, root, skipped)
        return files
    path = location(given)
    if path.is_dir():
        return _walk(path, path, skipped)
    if not path.exists():
        raise CurateError(f"input '{path}' does not exist")
    input_format(path)  # a file named itself must be one trident reads
    return [(path, path.name, None)]


def _fixed_part(pattern: str) -> Path:
    """The folders of a pattern before its first component with a wildcard."""
    parts = Path(os.path.expanduser(pattern)).parts
    fixed = [part for part in parts[:next(i for i, p in enumerate(parts) if any(m in p for m in _MAGIC))]]
    return Path(*fixed) if fixed else Path(".")


def _take(file: Path, root: Path, skipped: Counter, real: str | None = None) -> list[tuple[Path, str, str | None]]:
    if not supported(file):
        skipped[kind_of(file)] += 1
        return []
    return [(file, _relative(file, root), real)]


def _relative(file: Path, root: Path) -> str:
    try:
        return file.relative_to(root).as_posix() if root != file else file.name
    except ValueError:
        return file.name


def _walk(folder: Path, root: Path, skipped: Counter) -> list[tuple[Path, str, str | None]]:
    """Every supported file under `folder` in name order (a folder's files, then its subfolders),
    links followed, each real folder once."""
    if is_remote(folder):
        files = sorted((p for p in folder.rglob("*") if p.is_file()), key=str)
        return [entry for file in files for entry in _take(file, root, skipped)]
    found, visited, pending = [], set(), [str(folder)]
    while pending:
        current = pending.pop()
        real = os.path.realpath(current)
        if real in visited:  # a link back up the tree: walked already
            continue
        visited.add(real)
        try:
            entries = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError:  # unreadable: passed over, as os.walk does
            continue
        for entry in entries:  # the entry's type comes with the listing: no stat a file (link targets only)
            if not entry.is_dir() and entry.is_file():
                # a plain file's real path is its folder's plus its name: one realpath a folder, not a file
                file_real = os.path.realpath(entry.path) if entry.is_symlink() else os.path.join(real, entry.name)
                found += _take(Path(entry.path), root, skipped, file_real)
        pending += reversed([entry.path for entry in entries if entry.is_dir()])
    return found


def unique_names(files: list[tuple[Path, str]]) -> list[str]:
    """Each file's name, where two or more share one extended by its parent folders, one at a time,
    until it is unique (`index.html` twice: `en-US/index.html`, `de-DE/index.html`)."""
    names = [name for _, name in files]
    parts: dict[int, tuple] = {}  # only of the files whose names clash
    while True:
        counts = Counter(names)
        clashes = [i for i, name in enumerate(names) if counts[name] > 1]
        if not clashes:
            return names
        grown = False
        for i in clashes:
            depth = len(Path(names[i]).parts) + 1
            whole = parts.setdefault(i, Path(str(files[i][0])).parts)
            if depth <= len(whole):
                names[i] = Path(*whole[-depth:]).as_posix()
                grown = True
        if not grown:  # the same path twice under different spellings: its full spelling
            return [str(file) if i in clashes else names[i] for i, (file, _) in enumerate(files)]
