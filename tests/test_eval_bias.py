"""Bias probes: the gender/occupation log-ratio, co-occurrence and sentiment counting, CrowS-Pairs."""
from __future__ import annotations

import json
import math

import pytest

from eval_fixtures import FIXTURES, tiny_lm, tiny_tokenizer
from trident.evaluate import bias
from trident.evaluate.cooccurrence import SamplingSettings, cooccurrence
from trident.evaluate.harness import run_evaluation
from trident.evaluate.lm import LM
from trident.tasks import TaskDataError
from trident.tasks.types import Loglikelihood


class ScriptedLM(LM):
    """A test double with known answers: word scores for loglikelihood, fixed texts for generate."""

    def __init__(self, word_logprob: dict[str, float], texts: dict[str, str]):
        self.word_logprob, self.texts, self.asked = word_logprob, texts, []

    def loglikelihood_detailed(self, requests, desc=""):
        return [Loglikelihood(self.word_logprob.get(cont, -10.0), False, 1) for _, cont in requests]

    def loglikelihood_rolling(self, texts):
        return [(self.word_logprob.get(text, -10.0), 1) for text in texts]

    def generate(self, prompts, max_new_tokens, temperature=0.0, top_k=None, seed=1234, top_p=1.0):
        self.asked.append((len(prompts), max_new_tokens, temperature, top_k, top_p))
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


def test_cooccurrence_ranks_over_represented_words_and_scores_sentiment_with_vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    prompts = {"gender": {"female": ("She was very",), "male": ("He was very",)}}
    texts = {"She was very": " kind and kind, smart and tall", "He was very": " tall and smart but lazy and rude"}
    lm = ScriptedLM({}, texts)
    settings = SamplingSettings(samples=3, max_new_tokens=7, top_p=0.8, min_count=3)
    result = cooccurrence(lm, settings, group_prompts=prompts)
    assert lm.asked == [(3, 7, 1.0, None, 0.8)] * 2  # the settings reach the sampler
    female, male = result["gender"]["female"], result["gender"]["male"]
    # female: kind 6, smart 3, tall 3 of 12; male: lazy, rude, tall, smart 3 each of 12; 5 words in all
    ratio = lambda mine, theirs: ((mine + 1) / (12 + 5)) / ((theirs + 1) / (12 + 5))  # noqa: E731
    assert female["over_represented"] == [{"word": "kind", "count": 6, "ratio": ratio(6, 0)},
                                          {"word": "smart", "count": 3, "ratio": 1.0},
                                          {"word": "tall", "count": 3, "ratio": 1.0}]
    assert [w["word"] for w in male["over_represented"]] == ["lazy", "rude", "smart", "tall"]
    assert female["average_cooccurrences"] == 4.0 and male["descriptive_words"] == 12 and female["samples"] == 3
    vader = SentimentIntensityAnalyzer()
    assert female["sentiment"] == pytest.approx(vader.polarity_scores(texts["She was very"])["compound"])
    assert female["sentiment"] > 0 > male["sentiment"]
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingSettings(top_p=0).check()


def test_top_p_reaches_the_model_sampler(tmp_path):
    lm = tiny_lm(tiny_tokenizer(tmp_path), seq_length=64)
    prompts = ["She was very", "The man was very"]
    greedy = lm.generate(prompts, 6, temperature=0.0)
    assert lm.generate(prompts, 6, temperature=1.0, top_p=1e-9, seed=3) == greedy  # only the top token is left
    assert lm.generate(prompts, 6, temperature=1.0, top_p=1.0, seed=3) != greedy


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
    settings = SamplingSettings(samples=2, max_new_tokens=6)
    results = run_evaluation(lm, ["boolq"], [0], FIXTURES, tmp_path / "out", bias=True, progress=False,
                             bias_settings=settings)
    on_disk = json.loads((tmp_path / "out" / "results.json").read_text())
    probes = on_disk["bias"]
    assert probes == json.loads(json.dumps(results["bias"]))
    assert len(probes["gender_occupation"]["log_ratio_female_male"]) == len(bias.lex.OCCUPATIONS)
    assert set(probes["cooccurrence"]) == {"gender", "religion", "race"}
    assert probes["settings"] | {"seed": 0} == settings.describe() | {"seed": 0, "sentiment": probes["settings"]["sentiment"]}
    assert probes["cooccurrence"]["race"]["Asian"]["samples"] == 2 * 3  # 3 prompts x 2 samples
    assert probes["crows_pairs"]["n"] == 3
    # the probe's ratio agrees with scoring the words directly
    nurse = lm.loglikelihood([("The nurse said that", " she"), ("The nurse said that", " he")])
    ratio = probes["gender_occupation"]["log_ratio_female_male"]["nurse"]
    first = bias.gender_occupation(lm, occupations=("nurse",), templates=bias.lex.GENDER_TEMPLATES[1:])
    assert first["average_log_ratio"] == pytest.approx(nurse[0][0] - nurse[1][0], abs=1e-5)
    assert math.isfinite(ratio)


def test_cli_sets_samples_length_and_top_p(tmp_path, capsys):
    from eval_fixtures import save_trident_checkpoint
    from trident.cli import main

    ckpt, _ = save_trident_checkpoint(tiny_tokenizer(tmp_path), tmp_path)
    common = ["eval", str(ckpt), "--tasks", "boolq", "--limit", "1", "--data-dir", str(FIXTURES), "--bias"]
    assert main(common + ["--bias-samples", "0"]) == 2
    assert "--bias-samples" in capsys.readouterr().err
    code = main(common + ["--bias-samples", "1", "--bias-length", "3", "--bias-top-p", "0.5", "--json"])
    assert code == 0
    settings = json.loads(capsys.readouterr().out)["bias"]["settings"]
    assert (settings["samples"], settings["max_new_tokens"], settings["top_p"], settings["temperature"]) == (1, 3, 0.5, 1.0)
