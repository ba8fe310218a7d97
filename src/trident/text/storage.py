"""Where a user's path may point: a local path, or an fsspec URL (`s3://bucket/key`, `gs://`,
`memory://`, `file://`).

`location(path)` is the one entry point: a plain `pathlib.Path` for local paths (nothing changes for
them), a `UPath` (universal-pathlib: pathlib's API over fsspec) for URLs, so code written against
Path (`/`, `exists`, `glob`, `open`, `read_text`, `write_bytes`, `stat().st_size`) serves both.
What differs for object stores lives here: reads of byte ranges with no read-ahead (a rank fetches
only the bytes it loads), copies of small files into a local cache (an index a reader memory-maps),
whole-tree removal, and a fingerprint that says when a remote file changed.

Where a URL cannot be served (something that must be a local file or folder), `require_local` refuses
it at start with a ConfigError naming the argument, the path and why (the commands exit 2); and
`location` refuses a local path that is a URL whose `//` a local path collapsed (`s3:/bucket/run`),
so a URL never becomes a local folder named after its scheme.

S3 settings come from the usual places: AWS_* variables and ~/.aws for credentials, and
`FSSPEC_S3_ENDPOINT_URL` (or AWS_ENDPOINT_URL) for a non-AWS endpoint such as MinIO.
"""
from __future__ import annotations

import bisect
import hashlib
import io
import os
import shutil
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from trident.config.typed import ConfigError
from trident.text.schemes import LOCAL_PROTOCOLS, is_remote, protocol  # noqa: F401 (public here too)

class UnsupportedLocation(ConfigError):
    """A path trident cannot use where it was given: a URL where only a local path works, or a URL
    that a local path mangled."""


def _store_call(path, operation: str):
    """store_operation (a store's failure as one line, text/store_errors.py), imported when first used."""
    from trident.text.store_kinds import store_operation

    return store_operation(path, operation)


def location(path) -> Path:
    """A Path for local paths (`file://` stripped), a UPath for any other fsspec URL. Raises
    UnsupportedLocation for a local path holding a URL scheme as a folder (`s3:/bucket/run`)."""
    if hasattr(path, "fs") and is_remote(path):
        return path  # already a UPath
    text = str(path)
    if protocol(text) in ("file", "local"):
        return Path(text.split("://", 1)[1])
    if not is_remote(text):
        _refuse_collapsed_url(text)
        return Path(text)
    from upath import UPath  # imported only when a URL is used

    from trident.text.store_kinds import quiet_cut_requests

    quiet_cut_requests()
    # no listing cache: other processes and machines write the objects a listing must see
    return UPath(text, use_listings_cache=False)


def _refuse_collapsed_url(text: str) -> None:
    """A folder named `s3:` (or any fsspec scheme and a colon) is a URL that went through a local path
    (`Path("s3://b/run")` is `s3:/b/run`): refused, so that nothing is written to a local folder so named."""
    if ":" not in text:
        return
    from fsspec.registry import known_implementations, registry

    schemes = {*known_implementations, *registry}
    folder = next((part for part in text.split("/") if part.endswith(":") and part[:-1] in schemes), None)
    if folder is not None:
        raise UnsupportedLocation(f"{text}: a local path with a folder named '{folder}', i.e. a URL whose '//' was "
                                  f"collapsed; trident does not create such a folder (give the URL itself, "
                                  f"{folder}//...)")


def require_local(path, what: str, why: str) -> None:
    """Refuse a URL where only a local path works: UnsupportedLocation naming `what` (the argument or
    key), the path and `why`. None and local paths pass."""
    if path is None:
        return
    if is_remote(path):
        raise UnsupportedLocation(f"{what} {path}: an fsspec URL is not supported here ({why}); give a local path")
    location(path)  # a collapsed URL is refused too


def open_read(path) -> io.BufferedIOBase:
    """`path` opened for reading bytes in order, with the full io API (readline(limit), iteration)."""
    path = location(path)
    if not is_remote(path):
        return open(path, "rb")
    return io.BufferedReader(path.fs.open(path.path, "rb"), buffer_size=1 << 20)


def open_write(path):
    """`path` opened for writing bytes (an object store uploads it in parts, whole at close)."""
    path = location(path)
    return open(path, "wb") if not is_remote(path) else path.fs.open(path.path, "wb")


MERGED_GET_BYTES = 8 << 20  # AWS's advice for ranged GETs is 8-16 MB: larger reads stay concurrent GETs


def merged_gets(spans: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """(start, end) byte ranges, sorted, that cover the (offset, length) spans of a `size`-byte object:
    spans that touch or overlap share one range while it stays under MERGED_GET_BYTES (a rank's rows of
    a tile are such runs; a request costs far more than its bytes). No byte outside a span is fetched."""
    gets: list[list[int]] = []
    for offset, length in sorted(spans):
        end = min(offset + length, size)
        if gets and offset <= gets[-1][1] and max(end, gets[-1][1]) - gets[-1][0] <= MERGED_GET_BYTES:
            gets[-1][1] = max(gets[-1][1], end)
        else:
            gets.append([offset, end])
    return [(start, end) for start, end in gets]


class RangeReader:
    """A binary file opened for reads at chosen offsets: every read fetches exactly the bytes asked
    for (one ranged GET on an object store, no read-ahead), and `bytes_read` counts them.
    `prefetch(spans)` fetches many spans of an object concurrently (one round trip's latency
    instead of one per span), spans that touch as one ranged GET of up to MERGED_GET_BYTES; reads of
    exactly those spans are then served from memory."""

    def __init__(self, path) -> None:
        self.path = location(path)
        self.name, self.remote = str(self.path), is_remote(self.path)
        self.fetched: dict[tuple[int, int], memoryview] = {}
        self.position = 0
        if self.remote:
            self.handle = self.path.fs.open(self.path.path, "rb", cache_type="none")
            self.size = int(self.handle.size)
        else:
            self.handle = open(self.path, "rb")
            self.size = os.fstat(self.handle.fileno()).st_size
        self.bytes_read = 0

    def prefetch(self, spans: list[tuple[int, int]]) -> None:
        """Fetch the (offset, length) spans concurrently (object stores; nothing to do locally)."""
        if not self.remote or not spans:
            return
        gets = merged_gets(spans, self.size)
        with _store_call(self.path, f"reading {len(gets)} byte ranges"):
            blocks = self.path.fs.cat_ranges([self.path.path] * len(gets), [a for a, _ in gets], [b for _, b in gets])
        self.bytes_read += sum(len(block) for block in blocks)
        views = [memoryview(block) for block in blocks]  # slices share the block's memory
        self.fetched = {}
        for offset, length in spans:
            i = bisect.bisect_right(gets, (offset, float("inf"))) - 1
            start = offset - gets[i][0]
            self.fetched[(offset, length)] = views[i][start:start + min(length, self.size - offset)]

    def _reading(self, length: int):
        """A store's failure during this read as one line naming the object (nothing to add locally)."""
        return _store_call(self.path, f"reading {length} bytes at {self.position}") if self.remote else nullcontext()

    def seek(self, offset: int) -> None:
        self.position = offset  # the handle is moved only when a read is not served from `fetched`

    def read(self, length: int) -> bytes:
        data = self.fetched.pop((self.position, length), None)
        if data is not None:
            data = bytes(data)
        else:
            self.handle.seek(self.position)
            with self._reading(length):
                data = self.handle.read(length)
            self.bytes_read += len(data)
        self.position += len(data)
        return data

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.fetched.pop((self.position, len(view)), None)
        if data is None:
            self.handle.seek(self.position)
            with self._reading(len(view)):
                count = self.handle.readinto(view) or 0
            self.bytes_read += count
        else:
            count = len(data)
            view[:count] = data
        self.position += count
        return count

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BlockCachedFile:
    """Random reads of a large remote object through fsspec's LRU block cache: each read fetches
    the `block`-sized blocks it touches, unless recently fetched (samples read in order share them)."""

    def __init__(self, path, block: int) -> None:
        self.path, self.block = location(path), block
        self.handle, self.pid = None, None

    def read_at(self, offset: int, length: int) -> bytes:
        if self.pid != os.getpid():  # a forked worker opens its own connection
            self.handle, self.pid = self.path.fs.open(self.path.path, "rb", block_size=self.block,
                                                      cache_type="blockcache"), os.getpid()
        with _store_call(self.path, f"reading {length} bytes at {offset}"):
            self.handle.seek(offset)
            return self.handle.read(length)


def size(path) -> int:
    return location(path).stat().st_size


def fingerprint(path) -> dict:
    """What identifies a file's contents cheaply: where it is, its size and its modification mark
    (mtime locally; the object's ETag or last-modified time remotely)."""
    path = location(path)
    if not is_remote(path):
        stat = path.stat()
        return {"path": os.path.abspath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    info = path.fs.info(path.path)
    mark = info.get("ETag") or info.get("etag") or str(info.get("LastModified") or info.get("mtime") or "")
    return {"path": str(path), "size": int(info["size"]), "mark": str(mark).strip('"')}


def local_copy(path, folder: str) -> Path:
    """`path` itself when local; else a copy under cache_root()/`folder` named by the URL and its
    fingerprint, downloaded once (a changed object gets a new copy), for readers that map a file."""
    path = location(path)
    if not is_remote(path):
        return path
    key = hashlib.sha256(repr(sorted(fingerprint(path).items())).encode()).hexdigest()[:16]
    target = cache_root() / folder / f"{key}-{path.name}"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        with _store_call(path, f"copying into the local cache {target.parent}"):
            path.fs.get_file(path.path, str(tmp))
        os.replace(tmp, target)
    return target


def cache_root() -> Path:
    """Where local copies of remote files go: $TRIDENT_CACHE, else ~/.cache/trident."""
    return Path(os.environ.get("TRIDENT_CACHE") or Path.home() / ".cache" / "trident")


def remove_tree(path) -> None:
    """Delete a folder (or prefix of objects) and everything under it; nothing when absent."""
    path = location(path)
    if not is_remote(path):
        shutil.rmtree(path, ignore_errors=True)
    elif path.fs.exists(path.path):
        path.fs.rm(path.path, recursive=True)


def make_folder(path) -> Path:
    """`path` as a folder that exists (object stores have no folders: nothing to create there)."""
    path = location(path)
    if not is_remote(path):
        path.mkdir(parents=True, exist_ok=True)
    return path


def copy_file(source, target) -> None:
    """Copy one file between any two locations (local or URL); the target's folder is created."""
    source, target = location(source), make_folder(location(target).parent) / location(target).name
    if not is_remote(source) and not is_remote(target):
        shutil.copy2(source, target)
        return
    with open_read(source) as reader, open_write(target) as writer:
        shutil.copyfileobj(reader, writer, 8 << 20)


def replace(source, target) -> None:
    """Move the file `source` to `target`: a rename on a local disk; copy-then-delete on or across
    object stores (each object appears whole or not at all); the target's folder is created."""
    source, target = location(source), make_folder(location(target).parent) / location(target).name
    if not is_remote(source) and not is_remote(target):
        shutil.move(source, target)  # a rename within one filesystem
    elif is_remote(source) and protocol(source) == protocol(target):
        source.fs.mv(source.path, target.path)
    else:
        copy_file(source, target)
        source.unlink()


@contextmanager
def staged_prefix(target, commit_suffix: str) -> Iterator[Path]:
    """A local prefix to write the files PREFIX.* of `target`. A local target is its own stage; for
    a remote one the files are written into a temporary folder and, once the block completes,
    uploaded under `target`, the one ending in `commit_suffix` last (so a reader never finds it
    beside missing or partial files); nothing is uploaded when the block fails."""
    if not is_remote(target):
        yield Path(target)
        return
    target = location(target)
    with tempfile.TemporaryDirectory(prefix="trident-stage-") as folder:
        local = Path(folder) / target.name
        yield local
        files = sorted(Path(folder).iterdir(), key=lambda f: f.name.endswith(commit_suffix))
        for file in files:
            target.fs.put_file(str(file), f"{target.path}{file.name[len(local.name):]}")


@contextmanager
def staged_folder(target) -> Iterator[Path]:
    """A local folder to write the files of the folder `target` into, for writers that only write local
    files (safetensors, transformers, tokenizers). A local target is its own stage (created); for a
    remote one a temporary folder, whose files are uploaded under `target` once the block completes
    (nothing when it fails) and then removed."""
    if not is_remote(target):
        yield make_folder(target)
        return
    target = location(target)
    with tempfile.TemporaryDirectory(prefix="trident-stage-") as folder:
        yield Path(folder)
        for file in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            target.fs.put_file(str(file), f"{target.path}/{file.relative_to(folder).as_posix()}")


@contextmanager
def fetched_folder(source) -> Iterator[Path]:
    """The folder `source` as a local folder, for readers that only read local files: itself when
    local; else a temporary copy of every object under it, removed when the block ends."""
    if not is_remote(source):
        yield location(source)
        return
    source = location(source)
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such folder")
    with tempfile.TemporaryDirectory(prefix="trident-fetch-") as folder:
        source.fs.get(f"{source.path.rstrip('/')}/", f"{folder}/", recursive=True)
        yield Path(folder)


def save_array(path, array, **arrays) -> None:
    """np.save (one array) or np.savez (named `arrays`) to a local path or URL, never pickled."""
    import numpy as np

    with open_write(path) as handle:
        if arrays:
            np.savez(handle, **arrays)
        else:
            np.save(handle, array, allow_pickle=False)


def load_array(path, mapped: bool = False):
    """np.load of a .npy or .npz from a local path or URL (an .npz as a context manager, as np.load's);
    `mapped`: a local .npy memory-mapped (only the rows read are read from disk)."""
    import numpy as np

    path = location(path)
    if is_remote(path):
        return np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)
    return np.load(path, allow_pickle=False, mmap_mode="r" if mapped else None)
