"""What a reader saw, record by record: counts, bad-record examples, and each dropped record in
the shard's drop log; in strict mode a bad record raises CurateError instead."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from trident.curate.document import CurateError
from trident.text.damage import is_damage, lost_key

_MAX_LOGGED = 200  # error examples kept per log; all of them are counted


class RecordLog:
    """Counts what a reader saw ("in", "out", "dropped:<reason>", and for a damaged record also
    "lost:<file>:<reason>", see trident.text.damage) and keeps bad-record examples."""

    def __init__(self, strict: bool = False, drops=None) -> None:
        self.strict = strict
        self.counters: Counter = Counter()
        self.errors: list[dict] = []
        self.drops = drops  # a curate.droplog.DropLog: every dropped record, not only the examples

    def bad(self, file: Path | str, position: int | str, reason: str, detail: str, dropped: bool = True) -> None:
        """Report a bad record; counts `dropped:<reason>` (or `repaired:<reason>` when it was kept)."""
        if self.strict:
            raise CurateError(f"{file}: record at {position}: {reason}: {detail} (strict mode)")
        self.counters[f"{'dropped' if dropped else 'repaired'}:{reason}"] += 1
        if dropped and is_damage(reason):
            self.counters[lost_key(file, reason)] += 1  # exact per file, beyond the examples kept
        if dropped and self.drops is not None:
            self.drops.add("", "", "read", reason, position=f"{file} {position}", detail=detail[:300])
        if len(self.errors) < _MAX_LOGGED:
            self.errors.append({"file": str(file), "position": position, "reason": reason, "detail": detail[:300]})
