"""Llama-style blocks in the batched KV-cached engine (trident.infer.engine): a slot cache holding only
the key/value heads, rotary positions per row (prompts of different lengths, requests joining a
running batch), on one process and on tp2 x pp2 + SP (positions reach every pipeline stage), equal
to one process generating each request alone."""
import pytest
import torch

from distributed import run_distributed

PROMPTS = ["Return a new", "The", "def main(argv", "Raise an error if", "class", "A list of the values in"]
NEW = 8


def _requests(tokenizer):
    from trident.infer.batching import Request

    return [Request(tokenizer.encode(p), NEW, stop_at_eod=False) for p in PROMPTS]


@pytest.fixture(scope="module")
@torch.no_grad()
def reference(trained_llama_checkpoint):
    """Each request alone: greedy ids, and their log-probabilities from one full forward (no cache)."""
    from trident.checkpoint.reader import load_for_inference
    from trident.infer.generate import generate_tokens

    model, tokenizer, _ = load_for_inference(trained_llama_checkpoint[0])
    out = []
    for r in _requests(tokenizer):
        ids = generate_tokens(model, r.prompt_ids, NEW, tokenizer.vocab_size, greedy=True, stop_at_eod=False).new_ids
        whole = torch.tensor([r.prompt_ids + ids])
        logp = model(whole)[0, :, :tokenizer.vocab_size].double().log_softmax(-1)
        steps = range(len(r.prompt_ids) - 1, whole.shape[1] - 1)
        out.append((ids, [logp[i, whole[0, i + 1]].item() for i in steps]))
    return out


def _generate(rank, world, checkpoint, overrides, slots):
    from trident.evaluate.parallel_lm import load_parallel
    from trident.infer.batching import Scheduler
    from trident.infer.engine import Engine

    lm = load_parallel(checkpoint, overrides)
    scheduler = Scheduler(Engine.from_parallel(lm.model, lm.vocab_size, slots=slots), lm.eod_id)
    requests = _requests(lm.codec)
    for request in requests:
        scheduler.submit(request)
    scheduler.run_until_done()
    heads = [layer.k.shape[1] for layer in scheduler.engine.caches[0].layers]
    return [(r.new_ids, r.logprobs) for r in requests], heads


def _assert_same(got, reference):
    for (ids, logprobs), (want_ids, want_logprobs) in zip(got, reference):
        assert ids == want_ids
        assert logprobs == pytest.approx(want_logprobs, abs=1e-4)  # every decoding step's rotary positions


@pytest.mark.timeout(60)
def test_one_process_batches_gqa_like_generating_one_at_a_time(trained_llama_checkpoint, reference):
    got, cached_heads = _generate(0, 1, trained_llama_checkpoint[0], [], slots=3)  # 6 requests, 3 slots
    _assert_same(got, reference)
    assert cached_heads == [2, 2]  # the 2 key/value heads, not the 4 query heads


@pytest.mark.timeout(120)
def test_tp2_pp2_sp_generates_like_one_process(trained_llama_checkpoint, reference):
    overrides = ["parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true"]
    for got, cached_heads in run_distributed(_generate, 4, trained_llama_checkpoint[0], overrides, 4, timeout=100):
        _assert_same(got, reference)
        assert cached_heads == [1]  # one stage's layer, one kv head per TP rank
