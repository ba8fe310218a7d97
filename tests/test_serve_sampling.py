"""The sampling rules the OpenAI fields add, on logits and on the engine (no server): presence and
frequency penalties and logit_bias change the logits exactly as the API's formula says, the engine
chooses from the changed logits (greedy and seeded), and the seed rule for n choices."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from trident.infer.generate import apply_bias, sampling_bias
from trident.serve.fields import derived_seed

VOCAB = 64


def _penalised(logits: torch.Tensor, generated: list[int], presence: float, frequency: float,
               bias: dict[int, float]) -> torch.Tensor:
    """The formula as the OpenAI docs write it, one token at a time."""
    out = logits.clone()
    counts = Counter(generated)
    for j in range(out.shape[-1]):
        out[..., j] += bias.get(j, 0.0) - counts[j] * frequency - (1.0 if counts[j] > 0 else 0.0) * presence
    return out


@pytest.mark.timeout(30)
def test_penalties_and_logit_bias_change_logits_by_the_formula():
    logits = torch.randn(2, VOCAB, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    cases = [([3, 3, 5, 9, 3], 0.5, 0.25, {7: 2.0, 3: 1.0}), ([], 1.5, -0.5, {0: -100.0, 63: 100.0})]
    for generated, presence, frequency, bias in cases:
        added = sampling_bias(Counter(generated), presence, frequency, bias)
        ids = torch.tensor([list(added)] * 2, dtype=torch.long)
        values = torch.tensor([list(added.values())] * 2, dtype=torch.float64)
        got = apply_bias(logits, ids, values)
        assert torch.allclose(got, _penalised(logits, generated, presence, frequency, bias))
    # padding entries (id 0, value 0.0) change nothing
    padded = apply_bias(logits, torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.float64))
    assert torch.equal(padded, logits)
    # a +100 bias wins a softmax, a -100 one is never drawn
    probs = apply_bias(logits, torch.tensor([[5, 6]] * 2), torch.tensor([[100.0, -100.0]] * 2)).softmax(-1)
    assert bool((probs[:, 5] > 0.999).all()) and float(probs[:, 6].max()) < 1e-40


def _model():
    from trident.config.model import ModelConfig
    from trident.model.gpt import build_model

    cfg = ModelConfig(num_layers=2, hidden_size=32, num_heads=4, seq_length=64, vocab_size=VOCAB,
                      hidden_dropout=0.0, attention_dropout=0.0)
    return build_model(cfg, cfg.padded_vocab_size(), seed=5).eval()


def _engine_tokens(model, prompt: list[int], steps: int, **settings) -> list[int]:
    from trident.infer.batching import Request, Scheduler
    from trident.infer.engine import Engine

    scheduler = Scheduler(Engine.single(model, VOCAB, slots=2), eod_id=VOCAB - 1)
    other = Request([1, 2, 3], steps, stop_at_eod=False)  # batch company must not matter
    request = Request(list(prompt), steps, stop_at_eod=False, **settings)
    for r in (other, request):
        scheduler.submit(r)
    scheduler.run_until_done()
    return request.new_ids


@pytest.mark.timeout(60)
def test_engine_chooses_greedily_from_the_penalised_logits():
    model = _model()
    prompt, steps = [4, 8, 15, 16, 23, 42], 12
    presence, frequency, bias = 0.7, 0.9, {11: 1.5, 12: -3.0}
    want = []
    with torch.no_grad():
        for _ in range(steps):  # no cache: the whole sequence each step, the formula applied by hand
            logits = model(torch.tensor([prompt + want]))[0, -1, :VOCAB].double()
            want.append(int(_penalised(logits, want, presence, frequency, bias).argmax()))
    got = _engine_tokens(model, prompt, steps, presence_penalty=presence, frequency_penalty=frequency,
                         logit_bias=bias)
    assert got == want
    plain = _engine_tokens(model, prompt, steps)
    assert plain != got  # the penalties did change something here
    banned = plain[0]
    assert banned not in _engine_tokens(model, prompt, steps, logit_bias={banned: -100.0})
    assert set(_engine_tokens(model, prompt, steps, logit_bias={33: 100.0})) == {33}


@pytest.mark.timeout(60)
def test_sampling_with_penalties_is_reproducible_by_seed():
    model = _model()
    settings = dict(temperature=1.0, top_p=0.95, frequency_penalty=1.0, logit_bias={3: 2.0})
    first = _engine_tokens(model, [5, 6, 7], 10, seed=123, **settings)
    assert first == _engine_tokens(model, [5, 6, 7], 10, seed=123, **settings)
    assert first != _engine_tokens(model, [5, 6, 7], 10, seed=124, **settings)


def test_choice_seeds_are_seed_plus_index_wrapped_into_64_bits():
    assert [derived_seed(7, i) for i in range(3)] == [7, 8, 9]
    assert derived_seed(2**63 - 1, 1) == -2**63
    assert derived_seed(None, 1) is None
