"""Progress of a long loop: tqdm's bar on a terminal; in a log (stderr not a terminal) a plain line
every LOG_INTERVAL_S seconds and one at the end, never the carriage-return redraws a bar writes there.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator, TextIO

LOG_INTERVAL_S = 30.0  # a log line this often: enough to see a run move, few enough to read


class LineProgress:
    """The part of tqdm's interface trident's loops use (update, close, iteration, `with`), writing
    whole lines: `desc: n/total unit (p%), s`; `quiet` writes nothing."""

    def __init__(self, iterable: Iterable | None = None, total: int | None = None, desc: str | None = "",
                 unit: str = "it", interval: float = LOG_INTERVAL_S, stream: TextIO | None = None,
                 quiet: bool = False) -> None:
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc or "progress", unit.strip()
        self.interval, self.stream, self.quiet = interval, stream, quiet
        self.n, self.start, self._closed = 0, time.monotonic(), False
        self._last = self.start

    def __iter__(self) -> Iterator:
        try:
            for item in self.iterable or ():
                yield item
                self.update()
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if not self.quiet and now - self._last >= self.interval:
            self._last = now
            self._write(now)

    def close(self) -> None:
        if not (self._closed or self.quiet) and self.n:
            self._write(time.monotonic())
        self._closed = True

    def _write(self, now: float) -> None:
        count = f"{self.n}/{self.total}" if self.total else str(self.n)
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        print(f"{self.desc}: {count} {self.unit}{share}, {now - self.start:.1f} s", file=self.stream or sys.stderr,
              flush=True)

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str | None = "",
                 unit: str = "it", enabled: bool = True, **bar: Any):
    """tqdm(iterable, total, desc, unit, **bar) when enabled and stderr is a terminal; a LineProgress
    (lines in a log, nothing when not enabled: no tqdm import either) otherwise."""
    if enabled and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, **bar)
    return LineProgress(iterable, total, desc, unit, quiet=not enabled)
