"""Which input files were damaged and what each lost, as lines for a person.

Curation's readers count each damaged record under `lost:<file>:<reason>` beside its
`dropped:<reason>` (so the read stage's counters in stats.json hold them, exact however many there
are); `trident tokenize` keeps `damaged_files` = {file: {reason: n, "lines_before": N}} in its stats,
N being the lines read before a compressed file broke off (the rest of that file is lost).
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping

LOST_PREFIX = "lost:"
BROKEN_OFF = "lines_before"  # in a damaged_files entry: lines read before the file broke off
# dropped by a rule or empty, not damaged: a blank line, an empty text, a record over max_doc_bytes
NOT_DAMAGE = frozenset({"blank", "empty_text", "too_large"})


def is_damage(reason: str) -> bool:
    return reason not in NOT_DAMAGE


def lost_key(file, reason: str) -> str:
    """The reader counter of one record of `file` lost to `reason`."""
    return f"{LOST_PREFIX}{file}:{reason}"


def lost_by_file(counters: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """{file: {reason: records}} from counters with `lost:<file>:<reason>` keys (file may hold ':')."""
    found: dict[str, Counter] = {}
    for key, count in counters.items():
        if key.startswith(LOST_PREFIX) and count:
            file, _, reason = key[len(LOST_PREFIX):].rpartition(":")
            found.setdefault(file, Counter())[reason] += count
    return {file: dict(reasons) for file, reasons in found.items()}


def damage_summary(source: Mapping) -> list[str]:
    """One line per damaged file, most records lost first, e.g.
    'a.warc.gz: 3 records lost (damaged_gzip_member 2, bad_http_block 1)'.

    `source`: reader counters holding `lost:` keys (curate: stats["stages"][0]["counters"]), or
    {file: {reason: n}} (tokenize: stats["damaged_files"]). Empty when nothing was damaged.
    """
    files = source if any(isinstance(v, Mapping) for v in source.values()) else lost_by_file(source)
    lines = []
    for file, counts in sorted(files.items(), key=lambda item: (-_records(item[1]), item[0])):
        reasons = sorted(((r, n) for r, n in counts.items() if r != BROKEN_OFF), key=lambda rn: (-rn[1], rn[0]))
        total = _records(counts)
        line = f"{file}: {total} record{'s' if total != 1 else ''} lost ({', '.join(f'{r} {n}' for r, n in reasons)})"
        if BROKEN_OFF in counts:
            line += f"; unreadable after line {counts[BROKEN_OFF]}, the rest of the file is lost"
        lines.append(line)
    return lines


def _records(counts: Mapping[str, int]) -> int:
    return sum(n for reason, n in counts.items() if reason != BROKEN_OFF)
