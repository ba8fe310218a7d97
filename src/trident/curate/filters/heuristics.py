"""Heuristic document filters: minimum length (MT-NLG), Gopher quality and repetition rules
(Rae et al. 2021), C4 line rules (Raffel et al. 2020). Every threshold is a stage parameter;
every drop is counted under the rule that caused it."""
from __future__ import annotations

import re
from collections import Counter

from trident.curate.document import Document
from trident.curate.stage import StreamingStage, register_stage

_WORD = re.compile(r"\S+")
# GPT-2's pre-tokenizer (contractions, letter runs, digit runs, other symbols, white space), in `re`
# syntax; each piece is one GPT-2 BPE token or more
_GPT2_PIECES = re.compile(r"""'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")
LENGTH_UNITS = ("gpt2_pieces", "words")
_ALPHA = re.compile(r"[^\W\d_]")
_BULLETS = ("•", "-", "*", "‣", "◦", "⁃", "▪", "·", "–")
_STOP_WORDS = frozenset(["the", "be", "to", "of", "and", "that", "have", "with"])


def words_of(text: str) -> list[str]:
    return _WORD.findall(text)


def has_words(text: str, count: int) -> bool:
    """len(words_of(text)) >= count, reading only the first `count` words (str.split and \\S split
    at the same white space)."""
    return count <= 0 or len(text.split(maxsplit=count - 1)) >= count


def gpt2_pieces(text: str) -> int:
    """The pieces GPT-2's pre-tokenizer splits ``text`` into: a lower bound of its GPT-2 tokens."""
    return len(_GPT2_PIECES.findall(text))


@register_stage("min_length")
class MinLength(StreamingStage):
    """Drops documents with fewer than `min_tokens` tokens (`too_short`). MT-NLG counted GPT-2 BPE
    tokens; without a tokenizer file, `unit: gpt2_pieces` counts the pieces of GPT-2's
    pre-tokenizer (each one token or more, so never more than GPT-2 would count: letter and digit
    runs, symbol runs, white space, so code and tables count as GPT-2 counts them, not as their few
    spaces do), `unit: words` whitespace-separated words (~1.3 GPT-2 tokens each in English prose,
    more in code); with `tokenizer: PATH`, tokens of that HF `tokenizers` JSON file."""

    def __init__(self, min_tokens: int = 128, tokenizer: str | None = None, unit: str = "gpt2_pieces") -> None:
        if min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {min_tokens}")
        if unit not in LENGTH_UNITS:
            raise ValueError(f"parameter 'unit' must be one of {list(LENGTH_UNITS)}, got {unit!r}")
        super().__init__(min_tokens=min_tokens, tokenizer=tokenizer, unit=unit)
        self._tokenizer = None

    def setup(self) -> None:
        if self.params["tokenizer"]:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(self.params["tokenizer"]))

    def count_tokens(self, text: str) -> int:
        if self.params["tokenizer"] and self._tokenizer is None:
            self.setup()
        if self._tokenizer is not None:
            return len(self._tokenizer.encode(text).ids)
        return gpt2_pieces(text) if self.params["unit"] == "gpt2_pieces" else len(words_of(text))

    score_key = "length_tokens"  # a dropped document's count, in its drop record (`trident curate why`)

    def apply(self, doc: Document) -> Document | str:
        if not self.params["tokenizer"] and has_words(doc.text, self.params["min_tokens"]):
            return doc  # a word is one GPT-2 piece or more: most documents need no finer count
        tokens = self.count_tokens(doc.text)
        if tokens >= self.params["min_tokens"]:
            return doc
        doc.meta[self.score_key] = tokens  # on a dropped document only: kept ones are not changed
        return "too_short"


@register_stage("gopher_quality")
class GopherQuality(StreamingStage):
    """Gopher quality rules; drop reasons: word_count, mean_word_length, symbol_ratio,
    bullet_lines, ellipsis_lines, alpha_words, stop_words."""

    def __init__(self, min_words: int = 50, max_words: int = 100_000, min_mean_word_length: float = 3.0,
                 max_mean_word_length: float = 10.0, max_symbol_word_ratio: float = 0.1,
                 max_bullet_lines_ratio: float = 0.9, max_ellipsis_lines_ratio: float = 0.3,
                 min_alpha_words_ratio: float = 0.8, min_stop_words: int = 2) -> None:
        super().__init__(**{k: v for k, v in locals().items() if k not in ("self", "__class__")})

    def reason(self, text: str) -> str | None:
        """The first rule `text` breaks, or None."""
        p = self.params
        words = words_of(text)
        if not p["min_words"] <= len(words) <= p["max_words"]:
            return "word_count"
        mean_length = sum(len(w) for w in words) / len(words)
        if not p["min_mean_word_length"] <= mean_length <= p["max_mean_word_length"]:
            return "mean_word_length"
        symbols = text.count("#") + text.count("...") + text.count("…")
        if symbols / len(words) > p["max_symbol_word_ratio"]:
            return "symbol_ratio"
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        if sum(line.startswith(_BULLETS) for line in lines) / len(lines) > p["max_bullet_lines_ratio"]:
            return "bullet_lines"
        if sum(line.endswith(("...", "…")) for line in lines) / len(lines) > p["max_ellipsis_lines_ratio"]:
            return "ellipsis_lines"
        if sum(bool(_ALPHA.search(w)) for w in words) / len(words) < p["min_alpha_words_ratio"]:
            return "alpha_words"
        if len(_STOP_WORDS.intersection(w.lower() for w in words)) < p["min_stop_words"]:
            return "stop_words"
        return None

    def apply(self, doc: Document) -> Document | str:
        return self.reason(doc.text) or doc


def _duplicate_fraction(parts: list[str]) -> tuple[float, float]:
    """(fraction of parts that repeat an earlier one, fraction of characters in those repeats)."""
    seen: set[str] = set()
    dup_count = dup_chars = 0
    for part in parts:
        if part in seen:
            dup_count += 1
            dup_chars += len(part)
        seen.add(part)
    total_chars = sum(len(p) for p in parts) or 1
    return dup_count / max(len(parts), 1), dup_chars / total_chars


def top_ngram_char_fraction(words: list[str], n: int) -> float:
    """Characters in the most frequent word n-gram (times its count) over all word characters."""
    grams = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    if not grams:
        return 0.0
    gram, count = grams.most_common(1)[0]
    if count < 2:
        return 0.0
    return sum(len(w) for w in gram) * count / (sum(len(w) for w in words) or 1)


def duplicate_ngram_char_fraction(words: list[str], n: int) -> float:
    """Fraction of word characters covered by word n-grams that occur more than once."""
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    covered = [False] * len(words)
    for i, gram in enumerate(grams):
        if counts[gram] > 1:
            covered[i:i + n] = [True] * n
    dup_chars = sum(len(w) for w, c in zip(words, covered) if c)
    return dup_chars / (sum(len(w) for w in words) or 1)


@register_stage("gopher_repetition")
class GopherRepetition(StreamingStage):
    """Gopher repetition rules; drop reasons: dup_lines, dup_paragraphs, dup_line_chars,
    dup_paragraph_chars, top_<n>gram, dup_<n>gram."""

    def __init__(self, max_dup_line_frac: float = 0.30, max_dup_para_frac: float = 0.30,
                 max_dup_line_char_frac: float = 0.20, max_dup_para_char_frac: float = 0.20,
                 top_ngram_max: dict | None = None, dup_ngram_max: dict | None = None) -> None:
        top = {int(k): float(v) for k, v in (top_ngram_max or {2: 0.20, 3: 0.18, 4: 0.16}).items()}
        dup = {int(k): float(v) for k, v in (dup_ngram_max or {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12,
                                                                9: 0.11, 10: 0.10}).items()}
        super().__init__(max_dup_line_frac=max_dup_line_frac, max_dup_para_frac=max_dup_para_frac,
                         max_dup_line_char_frac=max_dup_line_char_frac,
                         max_dup_para_char_frac=max_dup_para_char_frac, top_ngram_max=top, dup_ngram_max=dup)

    def reason(self, text: str) -> str | None:
        p = self.params
        paragraphs = [x.strip() for x in re.split(r"\n{2,}", text) if x.strip()]
        para_frac, para_chars = _duplicate_fraction(paragraphs)
        if para_frac > p["max_dup_para_frac"]:
            return "dup_paragraphs"
        if para_chars > p["max_dup_para_char_frac"]:
            return "dup_paragraph_chars"
        lines = [x.strip() for x in text.split("\n") if x.strip()]
        line_frac, line_chars = _duplicate_fraction(lines)
        if line_frac > p["max_dup_line_frac"]:
            return "dup_lines"
        if line_chars > p["max_dup_line_char_frac"]:
            return "dup_line_chars"
        words = [w.lower() for w in words_of(text)]
        for n, limit in sorted(p["top_ngram_max"].items()):
            if top_ngram_char_fraction(words, n) > limit:
                return f"top_{n}gram"
        for n, limit in sorted(p["dup_ngram_max"].items()):
            if duplicate_ngram_char_fraction(words, n) > limit:
                return f"dup_{n}gram"
        return None

    def apply(self, doc: Document) -> Document | str:
        return self.reason(doc.text) or doc


_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_TERMINAL = (".", "!", "?", '"', "'", "”", "’")
_SENTENCE_END = re.compile(r"[.!?]+(\s|$)")


@register_stage("c4_lines")
class C4Lines(StreamingStage):
    """C4 rules. Lines are removed (counted as `lines_removed:<rule>`: javascript, policy,
    no_terminal_punct, too_few_words, long_word); documents are dropped for `lorem_ipsum`,
    `curly_bracket` and `too_few_sentences` (after line removal)."""

    def __init__(self, min_words_per_line: int = 3, min_sentences: int = 5, max_word_length: int = 1000,
                 drop_curly_bracket: bool = True, require_terminal_punct: bool = True) -> None:
        super().__init__(min_words_per_line=min_words_per_line, min_sentences=min_sentences,
                         max_word_length=max_word_length, drop_curly_bracket=drop_curly_bracket,
                         require_terminal_punct=require_terminal_punct)

    def _line_rule(self, line: str) -> str | None:
        lower = line.lower()
        words = line.split()
        if "javascript" in lower:
            return "javascript"
        if any(phrase in lower for phrase in _POLICY):
            return "policy"
        if self.params["require_terminal_punct"] and not line.endswith(_TERMINAL):
            return "no_terminal_punct"
        if len(words) < self.params["min_words_per_line"]:
            return "too_few_words"
        if any(len(w) > self.params["max_word_length"] for w in words):
            return "long_word"
        return None

    def apply(self, doc: Document) -> Document | str:
        lower = doc.text.lower()
        if "lorem ipsum" in lower:
            return "lorem_ipsum"
        if self.params["drop_curly_bracket"] and "{" in doc.text:
            return "curly_bracket"
        kept = []
        for line in doc.text.split("\n"):
            stripped = line.strip()
            if not stripped:
                continue
            rule = self._line_rule(stripped)
            if rule is None:
                kept.append(stripped)
            else:
                self.counters[f"lines_removed:{rule}"] += 1
        text = "\n".join(kept)
        if len(_SENTENCE_END.findall(text)) < self.params["min_sentences"]:
            return "too_few_sentences"
        doc.text = text
        return doc
