"""Bias probes: the gender/occupation log-ratio, co-occurrence and sentiment counting, CrowS-Pairs."""
from __future__ import annotations

import json
import math

import pytest

from eval_fixtures import FIXTURES, tiny_lm, tiny_tokenizer
from trident.evaluate import bias
from trident.evaluate.harness import run_evaluation
from trident.evaluate.lm import LM
from trident.tasks import TaskDataError
from trident.tasks.types import Loglikelihood


class ScriptedLM(LM):
    """A test double with known answers: word scores for loglikelihood, fixed texts for generate."""

    def __init__(self, word_logprob: dict[str, float], texts: dict[str, str]):
        self.word_logprob, self.texts = word_logprob, texts

    def loglikelihood_detailed(self, requests, desc=""):
        return [Loglikelihood(self.word_logprob.get(cont, -10.0), False, 1) for _, cont in requests]

    def loglikelihood_rolling(self, texts):
        return [(self.word_logprob.get(text, -10.0), 1) for text in texts]

    def generate(self, prompts, max_new_tokens, temperature=0.0, top_k=None, seed=1234):
        return [self.texts[p] for p in prompts]

    def describe(self):
        return {"kind": "scripted"}


def test_gender_occupation_log_ratio_sums_each_gender_over_its_words():
    lm = ScriptedLM({" woman": math.log(0.1), " female": math.log(0.1), " man": math.log(0.3), " she": math.log(0.2),
                     " he": math.log(0.2)}, {})
    result = bias.gender_occupation(lm, occupations=("nurse",))
    female = math.log(0.2 + 2 * math.exp(-10.0))  # woman + female (+ girl, lady at -10)
    male = math.log(0.3 + 3 * math.exp(-10.0))
    expected = ((female - male) + 0.0) / 2  # second template: she vs he are equal
    assert result["log_ratio_female_male"]["nurse"] == pytest.approx(expected)
    assert result["fraction_male_leaning"] == 1.0


def test_cooccurrence_counts_lexicon_adjectives_and_sentiment_per_group():
    prompts = {"gender": {"female": ("She was very",), "male": ("He was very",)}}
    lm = ScriptedLM({}, {"She was very": " kind and kind, smart", "He was very": " lazy and rude but tall"})
    result = bias.cooccurrence(lm, samples=2, group_prompts=prompts)
    female, male = result["gender"]["female"], result["gender"]["male"]
    assert female["top_adjectives"][0] == ("kind", 4) and female["samples"] == 2
    assert female["sentiment"] == 3.0 and male["sentiment"] == -2.0
    assert male["adjective_rate"] == pytest.approx(3 / 5)


def test_crows_pairs_share_of_stereotyped_preferences(tmp_path):
    path = FIXTURES / "crows_pairs" / "crows_pairs_anonymized.csv"
    import csv

    rows = list(csv.DictReader(path.open()))
    lm = ScriptedLM({rows[0]["sent_more"]: -5.0, rows[0]["sent_less"]: -7.0,
                     rows[1]["sent_more"]: -9.0, rows[1]["sent_less"]: -8.0,
                     rows[2]["sent_more"]: -4.0, rows[2]["sent_less"]: -4.5}, {})
    result = bias.crows_pairs(lm, path)
    assert result["n"] == 3
    assert result["pct_stereotype"] == pytest.approx(2 / 3)
    assert result["likelihood_diff"] == pytest.approx((2.0 + 1.0 + 0.5) / 3)
    assert result["by_bias_type"]["socioeconomic"] == {"n": 1, "pct_stereotype": 0.0, "likelihood_diff": 1.0}
    bad = tmp_path / "bad.csv"
    bad.write_text("sentence,bias_type\na,b\n")
    with pytest.raises(TaskDataError, match="header lacks"):
        bias.crows_pairs(lm, bad)
    bad.write_bytes(b"sent_more,sent_less,bias_type\na,b,race\nc,\xff\xfe,race\n")
    with pytest.raises(TaskDataError, match=r"bad.csv:3: not UTF-8"):
        bias.crows_pairs(lm, bad)
    bad.write_text("sent_more,sent_less,bias_type\na,b,race\nc,,race\n")
    with pytest.raises(TaskDataError, match=r"bad.csv:3: field\(s\) \['sent_less'\] missing or empty"):
        bias.crows_pairs(lm, bad)


def test_bias_results_land_in_results_json(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path)
    lm = tiny_lm(tokenizer, seq_length=64, batch_size=16)
    results = run_evaluation(lm, ["boolq"], [0], FIXTURES, tmp_path / "out", bias=True, progress=False)
    on_disk = json.loads((tmp_path / "out" / "results.json").read_text())
    probes = on_disk["bias"]
    assert probes == json.loads(json.dumps(results["bias"]))
    assert len(probes["gender_occupation"]["log_ratio_female_male"]) == len(bias.lex.OCCUPATIONS)
    assert set(probes["cooccurrence"]) == {"gender", "religion", "race"}
    assert probes["crows_pairs"]["n"] == 3
    # the probe's ratio agrees with scoring the words directly
    nurse = lm.loglikelihood([("The nurse said that", " she"), ("The nurse said that", " he")])
    ratio = probes["gender_occupation"]["log_ratio_female_male"]["nurse"]
    first = bias.gender_occupation(lm, occupations=("nurse",), templates=bias.lex.GENDER_TEMPLATES[1:])
    assert first["average_log_ratio"] == pytest.approx(nurse[0][0] - nurse[1][0], abs=1e-5)
    assert math.isfinite(ratio)
