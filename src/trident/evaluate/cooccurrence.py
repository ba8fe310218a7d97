"""Co-occurrence and sentiment of generated text by group, as GPT-3 (Brown et al. 2020, sec. 6.2) and
MT-NLG report them: for each prompt, `samples` continuations of `max_new_tokens` tokens drawn at
temperature 1 with nucleus (top-p) 0.9 — the papers' 800 samples of 50 tokens by default.

- descriptive words: the lexicon's adjectives (bias_lexicon.ADJECTIVES) found in a group's samples,
  counted once per occurrence. The papers tagged adjectives and adverbs with a part-of-speech
  tagger; no tagger ships its model inside a PyPI package (NLTK's and spaCy's are downloads), so the
  word list stands in for it.
- over-represented words: per group, the descriptive words it uses at least `min_count` times,
  ranked by how much more often it uses them than the other groups of its axis together (the ratio
  of add-one smoothed rates, each count over that side's descriptive-word total): the papers'
  "most biased / most favoured descriptive words", with each word's co-occurrence count, and the
  group's average co-occurrences over all its descriptive words (GPT-3 table 6.1's header line).
- sentiment: VADER's compound score (vaderSentiment, a maintained lexicon and rule set) of each
  sample, averaged per group: -1 most negative, +1 most positive.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass

from trident.evaluate import bias_lexicon as lex
from trident.evaluate.lm import LM
from trident.tasks.metrics import mean

WORD = re.compile(r"[a-z][a-z'-]*")


@dataclass
class SamplingSettings:
    """How the probes' texts are drawn; the defaults are GPT-3's and MT-NLG's."""
    samples: int = 800  # continuations per prompt
    max_new_tokens: int = 50  # the papers' sample length
    temperature: float = 1.0
    top_p: float = 0.9
    top: int = 10  # over-represented words reported per group
    min_count: int = 2  # a word used fewer times by a group is not ranked for it

    def check(self) -> "SamplingSettings":
        problems = [f"{name} must be >= 1, got {value}" for name, value in
                    (("samples", self.samples), ("max_new_tokens", self.max_new_tokens), ("top", self.top),
                     ("min_count", self.min_count)) if value < 1]
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.temperature > 0:
            problems.append(f"temperature must be > 0 (the probes sample), got {self.temperature}")
        if problems:
            raise ValueError("bias probes: " + "; ".join(problems))
        return self

    def describe(self) -> dict:
        return asdict(self)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def sentiment_scorer():
    """VADER's compound score as a function of text (needs the `bias` extra)."""
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
    except ImportError as error:
        raise ImportError("the bias probes' sentiment needs vaderSentiment: pip install 'trident-lm[bias]'") from error
    analyzer = SentimentIntensityAnalyzer()
    return lambda text: analyzer.polarity_scores(text)["compound"]


def over_represented(counts: dict[str, Counter], top: int, min_count: int) -> dict[str, list[dict]]:
    """group -> its descriptive words most over-represented against the other groups of the axis."""
    vocabulary = len(set().union(*counts.values())) or 1
    totals = {group: sum(c.values()) for group, c in counts.items()}
    ranked = {}
    for group, mine in counts.items():
        rest = sum((c for g, c in counts.items() if g != group), Counter())
        rest_total = sum(totals.values()) - totals[group]
        scored = []
        for word, count in mine.items():
            if count >= min_count:
                ratio = ((count + 1) / (totals[group] + vocabulary)) / ((rest[word] + 1) / (rest_total + vocabulary))
                scored.append({"word": word, "count": count, "ratio": ratio})
        ranked[group] = sorted(scored, key=lambda s: (-s["ratio"], -s["count"], s["word"]))[:top]
    return ranked


def cooccurrence(lm: LM, settings: SamplingSettings, seed: int = 1234, group_prompts=lex.GROUP_PROMPTS) -> dict:
    """axis -> group -> counts, over-represented words and sentiment of its generated samples."""
    score = sentiment_scorer()
    out: dict = {}
    for axis, groups in group_prompts.items():
        texts, counts = {}, {}
        for g, (group, prompts) in enumerate(groups.items()):
            texts[group] = lm.generate([p for p in prompts for _ in range(settings.samples)], settings.max_new_tokens,
                                       temperature=settings.temperature, seed=seed + g, top_p=settings.top_p)
            counts[group] = Counter(w for t in texts[group] for w in words(t) if w in lex.ADJECTIVES)
        favoured = over_represented(counts, settings.top, settings.min_count)
        out[axis] = {group: {
            "samples": len(texts[group]),
            "words": sum(len(words(t)) for t in texts[group]),
            "descriptive_words": sum(counts[group].values()),
            "average_cooccurrences": mean(list(counts[group].values())) if counts[group] else 0.0,
            "over_represented": favoured[group],
            "top_adjectives": counts[group].most_common(settings.top),
            "sentiment": mean([score(t) for t in texts[group]]),
        } for group in groups}
    return out
