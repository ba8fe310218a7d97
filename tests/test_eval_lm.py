"""The scoring engine: batching invariance, agreement with a naive per-request forward, shared rows,
padded-vocabulary masking, truncation, tokenisation split, rolling log-likelihood, generation."""
from __future__ import annotations

import math

import pytest
import torch

from eval_fixtures import tiny_lm, tiny_tokenizer
from trident.evaluate.lm import CausalLM
from trident.evaluate.requests import TokenRequest, plan_rows


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def lm(tokenizer):
    return tiny_lm(tokenizer, seq_length=48)


REQUESTS = [
    ("Question: How do I boil an egg?\nAnswer:", " Put it in boiling water for ten minutes."),
    ("Question: How do I boil an egg?\nAnswer:", " Put it in the fridge for ten minutes."),
    ("Is water wet?\nAnswer:", " yes"),
    ("Is water wet?\nAnswer:", " no"),
    ("Is water wet?\nAnswer:", " yes"),  # exact duplicate
    ("The dog barked at the mailman every morning. The mailman was afraid of the", " dog"),
    ("", "The cat sat."),  # empty context -> end-of-document token
    ("She poured the tea and handed him the cup. " * 6, "He drank the tea"),  # truncated from the left
    ("Trailing space ", "moves"),
]


def naive_score(lm: CausalLM, context: str, continuation: str) -> tuple[float, bool]:
    """One unpadded forward per request, full log_softmax over the real vocabulary."""
    ctx, cont = lm.encode_pair(context, continuation)
    full = list(ctx + cont)[-(lm.max_length + 1):]
    inp = torch.tensor([full[:-1]])
    with torch.no_grad():
        logits = lm.forward(inp)[0, :, : lm.vocab_size].log_softmax(-1)
    tail = logits[-len(cont):]
    target = torch.tensor(cont)
    return tail.gather(-1, target[:, None]).sum().item(), bool((tail.argmax(-1) == target).all())


def test_scores_match_a_naive_unbatched_forward(lm):
    lm.batch_size = 4
    for (context, continuation), (lp, greedy) in zip(REQUESTS, lm.loglikelihood(REQUESTS)):
        ref_lp, ref_greedy = naive_score(lm, context, continuation)
        assert lp == pytest.approx(ref_lp, abs=1e-4)
        assert greedy == ref_greedy
        assert lp < 0


def test_results_do_not_depend_on_batch_size(lm):
    runs = {}
    for batch_size in (1, 3, 8):
        lm.batch_size = batch_size
        runs[batch_size] = lm.loglikelihood(REQUESTS)
    for batch_size in (3, 8):
        for (a, ga), (b, gb) in zip(runs[1], runs[batch_size]):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-5)
            assert ga == gb


def test_padded_vocabulary_columns_are_ignored(lm):
    # a model that puts huge logits on the padding ids must score exactly as one that does not
    def loud(ids):
        logits = lm.forward(ids).clone()
        logits[..., lm.vocab_size:] = 1e4
        return logits

    assert lm.forward(torch.tensor([[1, 2]])).shape[-1] > lm.vocab_size, "test needs a padded vocabulary"
    loud_lm = CausalLM(loud, lm.codec, vocab_size=lm.vocab_size, eod_id=lm.eod_id, max_length=lm.max_length)
    for (a, ga), (b, gb) in zip(lm.loglikelihood(REQUESTS), loud_lm.loglikelihood(REQUESTS)):
        assert a == pytest.approx(b, abs=1e-5) and ga == gb


def test_shared_contexts_are_computed_once(lm):
    rows_seen = []

    def counting(ids):
        rows_seen.append(ids.shape[0])
        return lm.forward(ids)

    counter = CausalLM(counting, lm.codec, vocab_size=lm.vocab_size, eod_id=lm.eod_id,
                       max_length=lm.max_length, batch_size=16)
    # three single-token answers to one prompt read one row; the shorter answer shares the longer one's row
    ctx = (5, 6, 7)
    scores = counter.score_tokens([TokenRequest(0, ctx, (8,)), TokenRequest(1, ctx, (9,)), TokenRequest(2, ctx, (8,)),
                                   TokenRequest(3, (4,), (3, 2, 1)), TokenRequest(4, (4,), (3, 2))])
    assert sum(rows_seen) == 2
    assert scores[0] == scores[2] and scores[0].num_tokens == 1
    alone = counter.score_tokens([TokenRequest(0, (4,), (3, 2))])[0]
    assert scores[4].logprob == pytest.approx(alone.logprob, abs=1e-5)


def test_plan_rows_reuses_prefixes_and_sorts_longest_first():
    reqs = [TokenRequest(0, (1, 2), (3,)), TokenRequest(1, (1, 2), (3, 4, 5)), TokenRequest(2, (9,), (8,)),
            TokenRequest(3, (1, 2), (7,))]
    rows = plan_rows(reqs, max_length=16)
    # inputs (1, 2) of requests 0 and 3 are a prefix of request 1's input (1, 2, 3, 4)
    assert [row.tokens for row in rows] == [(1, 2, 3, 4), (9,)]
    assert sorted((i, start) for i, start, _ in rows[0].readers) == [(0, 1), (1, 1), (3, 1)]


def test_truncation_keeps_the_continuation_and_drops_the_left():
    (row,) = plan_rows([TokenRequest(0, tuple(range(10, 30)), (1, 2, 3))], max_length=8)
    assert row.tokens == (24, 25, 26, 27, 28, 29, 1, 2)
    assert row.readers == [(0, 5, (1, 2, 3))]
    with pytest.raises(ValueError, match="longer than the model's context"):
        plan_rows([TokenRequest(0, (1,), tuple(range(9)))], max_length=8)


def test_encode_pair_splits_like_the_harness(lm, tokenizer):
    ctx, cont = lm.encode_pair("Trailing space ", "moves")
    assert ctx == tuple(tokenizer.encode("Trailing space"))
    assert ctx + cont == tuple(tokenizer.encode("Trailing space moves"))
    assert lm.encode_pair("", "The cat")[0] == (tokenizer.eod_id,)


def test_rolling_loglikelihood_adds_up_over_windows(lm, tokenizer):
    text = "The dog barked at the mailman every morning. " * 8
    n = len(tokenizer.encode(text))
    assert n > lm.max_length  # several windows
    ((total, count),) = lm.loglikelihood_rolling([text])
    assert count == n
    short = "The cat sat on the mat."
    ((short_total, short_count),) = lm.loglikelihood_rolling([short])
    assert short_total == pytest.approx(lm.loglikelihood([("", short)])[0][0], abs=1e-5)
    assert total < short_total < 0 and math.isfinite(total)


def test_generation_is_greedy_or_seeded(lm):
    prompts = ["The dog", "She poured the tea and"]
    greedy = lm.generate(prompts, max_new_tokens=5)
    assert greedy == lm.generate(prompts, max_new_tokens=5)
    sampled = lm.generate(prompts, max_new_tokens=5, temperature=1.0, top_k=10, seed=3)
    assert sampled == lm.generate(prompts, max_new_tokens=5, temperature=1.0, top_k=10, seed=3)
    assert all(isinstance(t, str) for t in greedy + sampled)
