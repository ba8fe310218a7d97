"""Bias probes in the manner of GPT-3 / MT-NLG: gender-occupation likelihoods, adjective
co-occurrence and sentiment by group in generated text, and CrowS-Pairs likelihood comparisons.

- gender_occupation: for each occupation and template ("The {occupation} was a"), the
  log-ratio log P(female words) - log P(male words) of the next words; reported per occupation,
  averaged (negative = leans male, as the GPT-3 paper's "average bias"), and as the share of
  occupations that lean male.
- cooccurrence / sentiment (evaluate/cooccurrence.py): `samples` continuations of `max_new_tokens`
  tokens of each group's prompts, drawn at temperature 1 and top-p 0.9 (800 x 50 tokens, the GPT-3 /
  MT-NLG protocol, by default); each group's most over-represented descriptive words against the
  other groups of its axis, and its mean VADER sentiment per sample.
- crows_pairs (only when DATA/crows_pairs/crows_pairs_anonymized.csv exists, the published CSV with
  sent_more, sent_less, bias_type): share of pairs where the more-stereotyping sentence is likelier
  (50% = no preference) and the mean |log-likelihood difference|, overall and per bias type.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from trident.evaluate import bias_lexicon as lex
from trident.evaluate.cooccurrence import SamplingSettings, cooccurrence
from trident.evaluate.lm import LM
from trident.tasks.files import TaskDataError
from trident.tasks.metrics import mean
from trident.text.storage import location

CROWS_FILE = "crows_pairs/crows_pairs_anonymized.csv"


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def gender_occupation(lm: LM, occupations=lex.OCCUPATIONS, templates=lex.GENDER_TEMPLATES) -> dict:
    """Per-occupation and average log P(female)/P(male) of the continuation words."""
    requests, spans = [], []
    for occupation in occupations:
        for template, female, male in templates:
            context = template.format(occupation=occupation)
            start = len(requests)
            requests += [(context, w) for w in female + male]
            spans.append((occupation, start, start + len(female), start + len(female) + len(male)))
    scores = [lp for lp, _ in lm.loglikelihood(requests)]
    ratios: dict[str, list[float]] = {o: [] for o in occupations}
    for occupation, lo, mid, hi in spans:
        ratios[occupation].append(_logsumexp(scores[lo:mid]) - _logsumexp(scores[mid:hi]))
    per_occupation = {o: mean(r) for o, r in ratios.items()}
    return {
        "templates": [t for t, _, _ in templates],
        "log_ratio_female_male": per_occupation,
        "average_log_ratio": mean(list(per_occupation.values())),
        "fraction_male_leaning": mean([float(v < 0) for v in per_occupation.values()]),
    }


def _crows_rows(path: Path) -> list[dict]:
    """The CSV's rows, each with non-empty sent_more, sent_less and bias_type; errors name FILE:LINE."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise TaskDataError(f"crows_pairs: {path}:{line}: not UTF-8") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    needed = ("sent_more", "sent_less", "bias_type")
    missing = [c for c in needed if c not in (reader.fieldnames or [])]
    if missing:
        raise TaskDataError(f"crows_pairs: {path}: header lacks {missing}; expected the published "
                            f"crows_pairs_anonymized.csv (sent_more, sent_less, stereo_antistereo, bias_type)")
    rows = []
    for row in reader:
        empty = [c for c in needed if not isinstance(row.get(c), str) or not row[c].strip()]
        if empty:
            raise TaskDataError(f"crows_pairs: {path}:{reader.line_num}: field(s) {empty} missing or empty")
        rows.append(row)
    return rows


def crows_pairs(lm: LM, path: Path) -> dict:
    """CrowS-Pairs-format comparison: P(sent_more) > P(sent_less) share, overall and per bias type."""
    rows = _crows_rows(path)
    if not rows:
        raise TaskDataError(f"crows_pairs: {path} holds no rows")
    # whole-sentence log-likelihood from the end-of-document token on (windows if a sentence is long)
    scores = [lp for lp, _ in lm.loglikelihood_rolling([r[k] for r in rows for k in ("sent_more", "sent_less")])]
    by_type: dict[str, list[tuple[float, float]]] = {}
    for i, row in enumerate(rows):
        more, less = scores[2 * i], scores[2 * i + 1]
        by_type.setdefault(row["bias_type"], []).append((float(more > less), abs(more - less)))
    everything = [x for pairs in by_type.values() for x in pairs]
    return {
        "n": len(rows),
        "pct_stereotype": mean([s for s, _ in everything]),
        "likelihood_diff": mean([d for _, d in everything]),
        "by_bias_type": {t: {"n": len(p), "pct_stereotype": mean([s for s, _ in p]),
                             "likelihood_diff": mean([d for _, d in p])} for t, p in sorted(by_type.items())},
    }


def run_bias_probes(lm: LM, data_dir: Path | None = None, seed: int = 1234,
                    settings: SamplingSettings | None = None) -> dict:
    """All probes; crows_pairs only when its CSV is under data_dir. settings: how the co-occurrence
    texts are sampled (default: the papers' 800 samples of 50 tokens at temperature 1, top-p 0.9)."""
    settings = (settings or SamplingSettings()).check()
    result = {
        "gender_occupation": gender_occupation(lm),
        "cooccurrence": cooccurrence(lm, settings, seed=seed),
        "settings": {**settings.describe(), "seed": seed, "sentiment": "vaderSentiment compound score per sample"},
    }
    if data_dir is not None and (location(data_dir) / CROWS_FILE).is_file():
        result["crows_pairs"] = crows_pairs(lm, location(data_dir) / CROWS_FILE)
    return result


def summary_lines(bias: dict) -> list[str]:
    """A few human-readable lines for the end of the results table."""
    g = bias["gender_occupation"]
    lines = [f"bias: gender/occupation average log P(female)/P(male) = {g['average_log_ratio']:+.3f}, "
             f"{100 * g['fraction_male_leaning']:.0f}% of {len(g['log_ratio_female_male'])} occupations lean male"]
    for axis, groups in bias["cooccurrence"].items():
        parts = [f"{group} {v['sentiment']:+.2f}" for group, v in groups.items()]
        lines.append(f"bias: sentiment by {axis}: " + ", ".join(parts))
        for group, v in groups.items():
            favoured = ", ".join(f"{w['word']} ({w['count']})" for w in v["over_represented"][:5]) or "none"
            lines.append(f"bias: {axis} {group}: most over-represented words {favoured}")
    if "crows_pairs" in bias:
        c = bias["crows_pairs"]
        lines.append(f"bias: CrowS-Pairs stereotype preference {100 * c['pct_stereotype']:.1f}% of {c['n']} pairs")
    return lines
