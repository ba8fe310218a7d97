"""Generation: the sampling rules one by one (pure function), then KV-cached decoding of a trained
tiny model against full recomputation, the context window, padded ids, EOD, and the CLI."""
import json

import pytest
import torch

from trident.infer.generate import filter_logits, generate, generate_result, generate_tokens, sample_next


@pytest.fixture(scope="module")
def loaded(trained_checkpoint):
    from trident.checkpoint.reader import load_for_inference

    model, tokenizer, config = load_for_inference(trained_checkpoint[0])
    return model, tokenizer


# ---- sample_next / filter_logits -----------------------------------------------------------------
def test_greedy_and_zero_temperature_are_argmax():
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(0))
    expected = logits.argmax(-1)
    assert torch.equal(sample_next(logits, greedy=True), expected)
    assert torch.equal(sample_next(logits, temperature=0.0), expected)
    assert sample_next(logits[3], greedy=True).item() == expected[3].item()


def test_top_k_keeps_exactly_k_even_with_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.5, 3.0, -1.0]])
    for k in range(1, 8):
        kept = torch.isfinite(filter_logits(logits, top_k=k))
        assert kept.sum().item() == k
        if k < 7:  # every kept logit is at least every dropped one
            assert logits[kept].min() >= logits[~kept].max()
    logits = torch.randn(20, generator=torch.Generator().manual_seed(2))
    draws = sample_next(logits.expand(3000, 20), top_k=3, generator=torch.Generator().manual_seed(1))
    assert set(draws.tolist()) == set(logits.topk(3).indices.tolist())


@pytest.mark.parametrize("top_p, kept", [(0.4, {2}), (0.5, {2}), (0.6, {2, 0}), (0.75, {2, 0}),
                                         (0.8, {2, 0, 1}), (0.875, {2, 0, 1}), (0.9, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3})])
def test_top_p_keeps_smallest_set_reaching_p(top_p, kept):
    # probabilities 0.25, 0.125, 0.5, 0.125 (exact in binary), deliberately not sorted by id
    logits = torch.tensor([0.25, 0.125, 0.5, 0.125]).log()
    logits[3] -= 1e-6  # id 3 slightly below id 1, so the smallest set is unique
    out = filter_logits(logits, top_p=top_p)
    assert set(torch.nonzero(torch.isfinite(out)).flatten().tolist()) == kept
    draws = sample_next(logits.expand(2000, 4), top_p=top_p, generator=torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == kept


def test_top_k_then_top_p_compose():
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    # top-k 2 renormalises to 4/7, 3/7; top-p 0.5 then needs only the first
    assert torch.isfinite(filter_logits(logits, top_k=2, top_p=0.5)).sum().item() == 1
    assert torch.isfinite(filter_logits(logits, top_k=2, top_p=0.6)).sum().item() == 2


def test_temperature_scales_the_distribution():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    n = 20000
    for temperature in (0.5, 1.0, 2.0):
        draws = sample_next(logits.expand(n, 4), temperature=temperature, generator=torch.Generator().manual_seed(3))
        freq = torch.bincount(draws, minlength=4).double() / n
        expected = (logits.double() / temperature).softmax(-1)
        assert torch.allclose(freq, expected, atol=0.015), (temperature, freq, expected)
    # temperature T on logits l draws exactly what temperature 1 draws on l / T
    a = sample_next(logits.expand(500, 4), temperature=0.7, generator=torch.Generator().manual_seed(4))
    b = sample_next((logits / 0.7).expand(500, 4), temperature=1.0, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)


def test_seeded_sampling_is_reproducible():
    logits = torch.randn(64, 100, generator=torch.Generator().manual_seed(5))
    draw = lambda seed: sample_next(logits, 1.3, 20, 0.9, torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draw(7), draw(7))
    assert not torch.equal(draw(7), draw(8))


@pytest.mark.parametrize("kwargs, message", [({"temperature": -1.0}, "temperature"), ({"top_k": -2}, "top_k"),
                                             ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p")])
def test_bad_sampling_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sample_next(torch.zeros(5), **kwargs)


# ---- decoding a trained model --------------------------------------------------------------------
def _uncached(model, prompt, steps, vocab, pick):
    """Reference decoding: the whole sequence recomputed from scratch for every new token."""
    ids, all_logits = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids]))[0, -1, :vocab]
            all_logits.append(logits)
            ids.append(int(pick(logits)))
    return ids[len(prompt):], torch.stack(all_logits)


def test_cached_generation_equals_full_recomputation(loaded):
    model, tokenizer = loaded
    vocab, steps = tokenizer.vocab_size, 20
    prompt = tokenizer.encode("Return a new list")
    assert len(prompt) + steps < model.cfg.seq_length  # stays inside the window: no sliding involved
    cached = generate_tokens(model, prompt, steps, vocab, tokenizer.eod_id, greedy=True, stop_at_eod=False).new_ids
    expected, logits = _uncached(model, prompt, steps, vocab, lambda x: x.argmax())
    assert cached == expected
    # the cache gives the same logits at every step, not only the same argmax
    ids, cache, cached_logits = list(prompt), model.new_cache(), []
    with torch.no_grad():
        step_logits = model(torch.tensor([ids]), cache=cache)[0, -1, :vocab]
        for token in expected:
            cached_logits.append(step_logits)
            ids.append(token)
            step_logits = model(torch.tensor([[token]]), cache=cache, position_offset=len(ids) - 1)[0, -1, :vocab]
    torch.testing.assert_close(torch.stack(cached_logits), logits, rtol=1e-5, atol=1e-5)
    # sampling draws the same tokens too (same seed), and those are not a constant
    generator = torch.Generator().manual_seed(9)
    sampled, _ = _uncached(model, prompt, steps, vocab, lambda x: sample_next(x, 1.0, 0, 1.0, generator))
    cached = generate_tokens(model, prompt, steps, vocab, tokenizer.eod_id, seed=9, stop_at_eod=False).new_ids
    assert cached == sampled and len(set(sampled)) > 3


def test_generate_returns_decoded_continuation_and_is_seeded(loaded):
    model, tokenizer = loaded
    result = generate_result(model, tokenizer, "The ", 12, greedy=True, stop_at_eod=False)
    assert result.text == tokenizer.decode(result.new_ids) and len(result.new_ids) == 12
    assert result.stop_reason == "max_new_tokens" and result.seed is None
    a = generate(model, tokenizer, "The ", 15, temperature=1.0, top_k=50, seed=11)
    b = generate(model, tokenizer, "The ", 15, temperature=1.0, top_k=50, seed=11)
    c = generate(model, tokenizer, "The ", 15, temperature=1.5, seed=12, stop_at_eod=False)
    assert a == b and a != c
    unseeded = generate_result(model, tokenizer, "The ", 8, stop_at_eod=False)
    again = generate_result(model, tokenizer, "The ", 8, seed=unseeded.seed, stop_at_eod=False)
    assert unseeded.new_ids == again.new_ids  # the reported seed reproduces the text


class Boost(torch.nn.Module):
    """Wraps a GPT and adds a large constant to some logit columns."""

    def __init__(self, inner, columns):
        super().__init__()
        self.inner, self.cfg, self.columns = inner, inner.cfg, columns

    def new_cache(self):
        return self.inner.new_cache()

    def forward(self, tokens, **kwargs):
        logits = self.inner(tokens, **kwargs).clone()
        logits[..., self.columns] += 1e4
        return logits


def test_padded_vocabulary_ids_are_never_generated(loaded):
    model, tokenizer = loaded
    vocab = tokenizer.vocab_size
    boosted = Boost(model, slice(vocab, None))  # padded columns would win every time if considered
    for kwargs in ({"greedy": True}, {"temperature": 1.0, "seed": 0}):
        ids = generate_tokens(boosted, tokenizer.encode("a"), 10, vocab, tokenizer.eod_id, stop_at_eod=False,
                              **kwargs).new_ids
        assert len(ids) == 10 and max(ids) < vocab


def test_stops_at_eod_unless_told_not_to(loaded):
    model, tokenizer = loaded
    boosted = Boost(model, tokenizer.eod_id)
    stopped = generate_result(boosted, tokenizer, "x", 5, greedy=True)
    assert stopped.text == "" and stopped.new_ids == [] and stopped.stop_reason == "eod"
    kept = generate_result(boosted, tokenizer, "x", 3, greedy=True, stop_at_eod=False)
    assert kept.new_ids == [tokenizer.eod_id] * 3 and kept.text == "<|endoftext|>" * 3


def test_context_window_stop_and_slide(loaded):
    model, tokenizer = loaded
    seq = model.cfg.seq_length
    prompt = tokenizer.encode("Return the value of the key in the mapping")
    n = len(prompt)
    stop = generate_tokens(model, prompt, 100, tokenizer.vocab_size, tokenizer.eod_id, greedy=True,
                           stop_at_eod=False, context="stop")
    assert stop.stop_reason == "context_full" and len(stop.new_ids) == seq - n + 1
    assert any("context window" in note for note in stop.notes)
    slide = generate_tokens(model, prompt, 100, tokenizer.vocab_size, tokenizer.eod_id, greedy=True,
                            stop_at_eod=False, context="slide")
    assert len(slide.new_ids) == 100 and slide.stop_reason == "max_new_tokens"
    assert slide.new_ids[: len(stop.new_ids)] == stop.new_ids
    assert any("was full" in note for note in slide.notes)
    # after the first slide the model sees only the newest seq // 2 tokens, recomputed from position 0
    everything = prompt + slide.new_ids
    first = len(stop.new_ids)  # index (in new_ids) of the first token generated after the slide
    window = everything[: n + first][-(seq // 2):]
    with torch.no_grad():
        expected = int(model(torch.tensor([window]))[0, -1, : tokenizer.vocab_size].argmax())
    assert slide.new_ids[first] == expected


def test_long_prompt_is_truncated_or_refused(loaded):
    model, tokenizer = loaded
    seq = model.cfg.seq_length
    prompt = list(range(10, 10 + seq + 5))
    result = generate_tokens(model, prompt, 2, tokenizer.vocab_size, greedy=True)
    assert len(result.new_ids) == 2 and "truncated" in result.notes[0]
    with pytest.raises(ValueError, match="exceeds model.seq_length"):
        generate_tokens(model, prompt, 2, tokenizer.vocab_size, greedy=True, context="stop")


def test_empty_prompt_starts_a_document_and_mode_is_restored(loaded):
    model, tokenizer = loaded
    model.train()
    text = generate(model, tokenizer, "", 6, greedy=True, stop_at_eod=False)
    assert model.training  # put back as it was
    model.eval()
    assert len(text) > 0 and text == generate(model, tokenizer, "", 6, greedy=True, stop_at_eod=False)


# ---- the command ---------------------------------------------------------------------------------
def test_cli_generate(trained_checkpoint, loaded, capsys):
    from trident.cli import main

    path, tokenizer, _ = trained_checkpoint
    model, _ = loaded
    assert main(["generate", str(path), "--prompt", "Return the", "--max-new-tokens", "9", "--greedy",
                 "--no-stop-at-eod", "--threads", "1", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["completion"] == generate(model, tokenizer, "Return the", 9, greedy=True, stop_at_eod=False)
    assert record["new_tokens"] == 9 and record["stop_reason"] == "max_new_tokens"
    sampled = [main(["generate", str(path), "--prompt", "The", "--max-new-tokens", "7", "--top-k", "20",
                     "--top-p", "0.9", "--temperature", "0.8", "--seed", "3", "--json"]) for _ in range(2)]
    first, second = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sampled == [0, 0] and first == second | {"seconds": first["seconds"], "tokens_per_s": first["tokens_per_s"]}
    assert first["seed"] == 3 and first["new_tokens"] + (first["stop_reason"] == "eod") >= 1
    assert main(["generate", str(path), "--prompt", "The", "--max-new-tokens", "4", "--greedy"]) == 0
    assert capsys.readouterr().out.startswith("The")
    assert main(["generate", str(path), "--greedy", "--top-k", "5"]) == 2
    assert "--greedy cannot be combined with --top-k" in capsys.readouterr().err
    assert main(["generate", str(path / "nope"), "--prompt", "x"]) == 1
    assert "error" in capsys.readouterr().err
