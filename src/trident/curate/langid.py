"""Language identification with py3langid (its model ships inside the package: nothing is downloaded)."""
from __future__ import annotations

from functools import lru_cache

from trident.curate.document import Document
from trident.curate.stage import StreamingStage, register_stage


@register_stage("langid")
class LangId(StreamingStage):
    """Keeps documents whose language is in `languages` with probability >= `threshold`.

    Sets meta "language" and "language_score". Drops `language:<code>` (another language) and
    `low_confidence` (a kept language, but below the threshold) and `empty`. Only the first `max_chars`
    characters are classified (enough for a stable answer, bounded cost on huge documents)."""

    def __init__(self, languages: list[str] | tuple = ("en",), threshold: float = 0.5,
                 max_chars: int = 10_000) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        super().__init__(languages=list(languages), threshold=threshold, max_chars=max_chars)
        self.languages = set(languages)
        self._identifier = None

    def setup(self) -> None:
        self._identifier = bundled_identifier()

    def apply(self, doc: Document) -> Document | str:
        if self._identifier is None:
            self.setup()
        if not doc.text.strip():
            return "empty"  # the model would still name a language for no text
        language, probability = self._identifier.classify(doc.text[: self.params["max_chars"]])
        doc.meta["language"] = language
        doc.meta["language_score"] = round(float(probability), 4)
        if language not in self.languages:
            return f"language:{language}"
        if probability < self.params["threshold"]:
            return "low_confidence"
        return doc


@lru_cache(maxsize=1)
def bundled_identifier():
    """py3langid's bundled model with normalised probabilities, loaded once per process (~1 s)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
