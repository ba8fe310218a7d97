"""A log of lines that grows on an object store, which cannot append to an object.

The lines go up in parts: every `interval_s` seconds a background thread uploads the lines written
since the last upload as one new object, `LOG.parts/NNNNNNNNNNNN.jsonl`, named by the number of its
first line in the whole log (0-based); nothing is uploaded twice while the log grows. At a clean close
the parts are joined into the one object `LOG` (a reader of the plain object sees every line) and
removed. `read_lines(LOG)` reads `LOG` and then every part's lines not already in it, so a log is read
whole at any moment: while written, after a kill, or after a crash between the join and the removal.

What a kill (SIGKILL, a lost node) loses: the lines not yet in a part, i.e. those written since the
last upload that completed (at most `interval_s` plus one upload's time, while the store answers).
"""
from __future__ import annotations

import threading

from trident.text.storage import is_remote, location, remove_tree
from trident.text.store_errors import StoreError, store_operation

PART_DIGITS = 12


def parts_folder(path):
    """Where the parts of the log `path` lie: `path` with `.parts` appended, a folder beside it."""
    path = location(path)
    return path.parent / f"{path.name}.parts"


def _parts(path) -> list:
    if not is_remote(path):
        return []
    folder = parts_folder(path)
    return sorted(folder.fs.glob(f"{folder.path}/{'[0-9]' * PART_DIGITS}.jsonl"))  # zero-padded: in line order


def log_exists(path) -> bool:
    """Whether the log holds anything: the file (object) or a part."""
    return location(path).exists() or bool(_parts(location(path)))


def read_lines(path) -> list[str]:
    """Every line of the log `path` in order, each once: the object, then the lines of each part that
    come after it. Raises FileNotFoundError when there is neither."""
    path = location(path)
    parts = _parts(path)
    if not parts and not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    lines = path.read_text().splitlines() if path.exists() else []
    for part in parts:
        first = int(part.rsplit("/", 1)[1].split(".")[0])
        text = path.fs.cat_file(part).decode().splitlines()
        lines += text[max(0, len(lines) - first):]  # a part already joined into the object adds nothing
    return lines


class AppendedObject:
    """Lines appended to the log `path` on an object store (module docstring). `append` keeps what
    the log holds (a resumed run); otherwise the log starts anew."""

    def __init__(self, path, interval_s: float, append: bool) -> None:
        self.path, self.folder, self.interval_s = location(path), parts_folder(path), interval_s
        with store_operation(self.path, "opening the log"):
            if append:
                self.uploaded = len(read_lines(self.path)) if log_exists(self.path) else 0  # lines on the store
            else:
                self.uploaded = 0
                self.path.unlink(missing_ok=True)
                remove_tree(self.folder)
        self.pending: list[str] = []
        self.lock, self.upload_lock = threading.Lock(), threading.Lock()  # the pending lines; one upload at a time
        self.error: StoreError | None = None  # the last failed timed upload (retried at the next tick)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._tick, name="trident-log-upload", daemon=True)
        self.thread.start()

    def append(self, line: str) -> None:
        with self.lock:
            self.pending.append(line)

    def upload(self) -> None:
        """Upload the lines written since the last upload as one new part; raises StoreError when the
        store fails (the lines stay pending, for the next upload)."""
        with self.upload_lock:
            with self.lock:
                lines = list(self.pending)
            if not lines:
                return
            part = self.folder / f"{self.uploaded:0{PART_DIGITS}d}.jsonl"
            with store_operation(part, f"uploading lines {self.uploaded + 1}-{self.uploaded + len(lines)} of the log"):
                part.fs.pipe_file(part.path, "".join(line + "\n" for line in lines).encode())
            with self.lock:
                del self.pending[:len(lines)]
            self.uploaded += len(lines)

    def _tick(self) -> None:
        while not self.stop.wait(self.interval_s):
            try:
                self.upload()
                self.error = None
            except StoreError as error:  # a store that is away: retried at the next tick, raised by close()
                self.error = error

    def close(self, quiet: bool = False) -> None:
        """Upload what is pending, join the parts into the one object and remove them. `quiet`: a store
        failure is not raised (a run already failing reports its own error)."""
        self.stop.set()
        self.thread.join()
        try:
            self.upload()
            self._join()
        except StoreError:
            if not quiet:
                raise

    def _join(self) -> None:
        if not _parts(self.path):
            return
        with store_operation(self.path, "joining the log's parts into one object"):
            lines = read_lines(self.path)
            self.path.fs.pipe_file(self.path.path, "".join(line + "\n" for line in lines).encode())
            remove_tree(self.folder)  # after the join: a crash in between leaves parts that add nothing
