"""Did-you-mean for a mistyped name (a command, a preset, a config key or one of a key's values): the
closest known name by difflib's ratio, when one is close enough to be what was meant."""
from __future__ import annotations

import difflib
from typing import Iterable


def closest(word: object, known: Iterable[object]) -> str | None:
    """The known name nearest `word` (difflib ratio >= 0.6), or None."""
    found = difflib.get_close_matches(str(word), [str(name) for name in known], n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: object, known: Iterable[object]) -> str:
    """"; did you mean 'X'?" to append to a refusal naming `word`, or "" when nothing is close."""
    name = closest(word, known)
    return f"; did you mean {name!r}?" if name is not None and name != str(word) else ""
