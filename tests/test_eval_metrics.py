"""Metric arithmetic: choice selection, length normalisation, aggregation and standard errors."""
from __future__ import annotations

import math

import pytest

from trident.tasks import get_task
from trident.tasks.metrics import bootstrap_stderr, mean_stderr, perplexity
from trident.tasks.types import Loglikelihood as L

PIQA_DOC = {"goal": "g", "sol1": "short", "sol2": "a much much longer solution", "label": 1}


def test_acc_picks_summed_loglik_and_norms_divide_by_chars_and_tokens():
    task = get_task("piqa")
    # sol1: -6 over 5 chars (-1.2/char), 2 tokens (-3/token); sol2: -8 over 27 chars (-0.30/char), 8 tokens (-1/token)
    metrics = task.score(PIQA_DOC, [L(-6.0, False, 2), L(-8.0, False, 8)])
    assert metrics == {"acc": 0.0, "acc_norm": 1.0, "acc_norm_token": 1.0}
    # per token, sol1 wins when it has many tokens: -6/10 > -8/8
    metrics = task.score(PIQA_DOC, [L(-6.0, False, 10), L(-8.0, False, 8)])
    assert metrics == {"acc": 0.0, "acc_norm": 1.0, "acc_norm_token": 0.0}


def test_ties_go_to_the_first_choice():
    assert get_task("piqa").score(PIQA_DOC | {"label": 0}, [L(-1.0, True, 1), L(-1.0, True, 1)])["acc"] == 1.0


def test_mean_stderr_is_the_binomial_error_for_accuracy():
    values = [1.0] * 30 + [0.0] * 70
    p, n = 0.3, 100
    assert mean_stderr(values) == pytest.approx(math.sqrt(p * (1 - p) / (n - 1)))
    assert math.isnan(mean_stderr([1.0]))


def test_aggregate_averages_and_reports_errors():
    task = get_task("piqa")
    values, errors = task.aggregate([{"acc": 1.0, "acc_norm": 0.0}, {"acc": 0.0, "acc_norm": 0.0},
                                     {"acc": 1.0, "acc_norm": 1.0}, {"acc": 1.0, "acc_norm": 1.0}])
    assert values == {"acc": 0.75, "acc_norm": 0.5}
    assert errors["acc"] == pytest.approx(0.25)  # sqrt(0.75 * 0.25 / 3) = 0.25


def test_lambada_accuracy_is_all_tokens_greedy_and_perplexity_is_exp_of_mean_loss():
    task = get_task("lambada")
    doc = {"text": "a b c"}
    per_example = [task.score(doc, [L(-1.0, True, 2)]), task.score(doc, [L(-3.0, False, 1)])]
    values, errors = task.aggregate(per_example)
    assert values["acc"] == 0.5
    assert values["perplexity"] == pytest.approx(math.exp(2.0))
    assert perplexity([-1.0, -3.0]) == pytest.approx(math.exp(2.0))
    assert errors["perplexity"] > 0


def test_bootstrap_stderr_is_seeded_and_close_to_the_analytic_error():
    values = [float(i % 2) for i in range(200)]
    a = bootstrap_stderr(values, lambda v: sum(v) / len(v), iters=500, seed=7)
    assert a == bootstrap_stderr(values, lambda v: sum(v) / len(v), iters=500, seed=7)
    assert a == pytest.approx(mean_stderr(values), rel=0.2)


def test_winogrande_scores_the_shared_ending_under_each_option():
    task = get_task("winogrande")
    doc = {"sentence": "A beat B because _ was strong.", "option1": "A", "option2": "B", "label": 0}
    assert task.requests(doc, "P\n\n") == [("P\n\nA beat B because A", " was strong."),
                                            ("P\n\nA beat B because B", " was strong.")]
    assert task.score(doc, [L(-2.0, False, 3), L(-5.0, False, 3)]) == {"acc": 1.0}
    assert task.score(doc, [L(-6.0, False, 3), L(-5.0, False, 3)]) == {"acc": 0.0}


def test_hans_reports_accuracy_by_heuristic_and_label():
    task = get_task("hans")
    docs = [{"premise": "p", "hypothesis": "h", "heuristic": "lexical_overlap", "subcase": "s", "label": 0},
            {"premise": "p", "hypothesis": "h", "heuristic": "lexical_overlap", "subcase": "s", "label": 1},
            {"premise": "p", "hypothesis": "h", "heuristic": "constituent", "subcase": "s", "label": 1}]
    always_true = [L(-1.0, True, 1), L(-2.0, False, 1)]  # the model always answers "True" (= entailment)
    values, _ = task.aggregate([task.score(d, always_true) for d in docs])
    assert values["acc"] == pytest.approx(1 / 3)
    assert values["acc_lexical_overlap"] == 0.5
    assert values["acc_lexical_overlap_entailed"] == 1.0
    assert values["acc_lexical_overlap_non_entailed"] == 0.0
    assert values["acc_constituent"] == 0.0
