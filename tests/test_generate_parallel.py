"""KV-cached batched generation (trident.infer.engine + batching): prompts of different lengths in one
batch, more requests than cache slots (requests join and leave the running batch), seeded sampling
and prompt scoring all equal one process's generate_tokens / full forward, on one process and on
TP, PP and TP x PP (+SP) layouts over gloo; and `trident generate --nproc 2` prints what one process prints.
Sampled generation's collectives pass their tensors on the run's device (an audit)."""
from __future__ import annotations

import json

import pytest
import torch

from distributed import run_distributed
from serve_fixtures import PROMPTS, serving_checkpoint

NEW = 10


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return serving_checkpoint(tmp_path_factory.mktemp("gen_parallel"), seq_length=128)[0]


def _requests(tokenizer):
    from trident.infer.batching import Request

    greedy = [Request(tokenizer.encode(p), NEW, stop_at_eod=False) for p in PROMPTS]
    sampled = Request(tokenizer.encode(PROMPTS[0]), NEW, temperature=0.8, top_k=30, top_p=0.95, seed=7,
                      stop_at_eod=False)
    scored = Request(tokenizer.encode(PROMPTS[2]), 0, echo=True, top_n=3)
    return greedy + [sampled, scored]


def _results(requests) -> list:
    return [(r.new_ids, r.finish_reason, r.prompt_logprobs, [[i for i, _ in t] for t in r.prompt_tops])
            for r in requests]


@pytest.fixture(scope="module")
def reference(checkpoint):
    """What one process computes request by request: generate_tokens, and a full forward for the scores."""
    from trident.checkpoint.reader import load_for_inference
    from trident.infer.generate import generate_tokens

    model, tokenizer, _ = load_for_inference(checkpoint)
    requests = _requests(tokenizer)
    for r in requests[:-1]:
        out = generate_tokens(model, r.prompt_ids, r.max_new_tokens, tokenizer.vocab_size, tokenizer.eod_id,
                              greedy=r.temperature == 0, temperature=r.temperature or 1.0, top_k=r.top_k,
                              top_p=r.top_p, seed=r.seed, stop_at_eod=False)
        r.new_ids, r.finish_reason = out.new_ids, "length"
    scored = requests[-1]
    with torch.no_grad():
        logp = model(torch.tensor([scored.prompt_ids]))[0, :-1, : tokenizer.vocab_size].double().log_softmax(-1)
    targets = torch.tensor(scored.prompt_ids[1:])
    scored.prompt_logprobs = [None] + logp.gather(-1, targets[:, None]).squeeze(-1).tolist()
    scored.prompt_tops = [[]] + [[(i, 0.0) for i in row.tolist()] for row in logp.topk(3, dim=-1).indices]
    scored.finish_reason = "length"
    return _results(requests)


def _generate_on_layout(rank, world, checkpoint, overrides, slots):
    from trident.evaluate.parallel_lm import load_parallel
    from trident.infer.batching import Scheduler
    from trident.infer.engine import Engine

    lm = load_parallel(checkpoint, overrides)
    engine = Engine.from_parallel(lm.model, lm.vocab_size, slots=slots)
    scheduler = Scheduler(engine, lm.eod_id)
    requests = _requests(lm.codec)
    for request in requests:
        scheduler.submit(request)
    scheduler.run_until_done()
    return _results(requests)


def _assert_same(got, want):
    for (ids, reason, lps, tops), (want_ids, want_reason, want_lps, want_tops) in zip(got, want):
        assert ids == want_ids and reason == want_reason
        assert lps[1:] == pytest.approx(want_lps[1:], abs=1e-4) and tops == want_tops


@pytest.mark.timeout(60)
def test_one_process_batches_like_generating_one_at_a_time(checkpoint, reference):
    # 3 slots for 10 requests: most join a running batch and take a slot another has left
    _assert_same(_generate_on_layout(0, 1, checkpoint, [], slots=3), reference)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world, overrides", [
    (2, ["parallel.tp=2"]),
    (2, ["parallel.pp=2"]),
    (4, ["parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true"]),
], ids=["tp2", "pp2", "tp2xpp2-sp"])
def test_layouts_generate_like_one_process(checkpoint, reference, world, overrides):
    for got in run_distributed(_generate_on_layout, world, checkpoint, overrides, 4, timeout=100):
        _assert_same(got, reference)


@pytest.mark.timeout(60)
def test_cancelled_request_frees_its_slot_for_a_waiting_one(checkpoint):
    from trident.checkpoint.reader import load_for_inference
    from trident.infer.batching import Request, Scheduler
    from trident.infer.engine import Engine

    model, tokenizer, _ = load_for_inference(checkpoint)
    scheduler = Scheduler(Engine.single(model, tokenizer.vocab_size, slots=1), tokenizer.eod_id)
    first = Request([1, 2, 3], 50, stop_at_eod=False)
    second = Request([4, 5], 5, stop_at_eod=False)
    scheduler.submit(first)
    scheduler.submit(second)
    scheduler.step()
    assert list(scheduler.running.values()) == [first] and list(scheduler.waiting) == [second]
    first.cancelled = True
    scheduler.run_until_done()
    assert first.finish_reason == "cancelled" and len(first.new_ids) < 50
    assert second.finish_reason == "length" and len(second.new_ids) == 5
    with pytest.raises(ValueError, match="exceeds the context"):
        scheduler.submit(Request([1] * 120, 9))


def _audited_generation(rank, world, checkpoint):
    import argparse

    from collective_fixtures import audit_collectives
    from trident.commands.generate_parallel import _generate

    calls = audit_collectives()
    args = argparse.Namespace(checkpoint=checkpoint, overrides=["parallel.tp=2"], device="auto", seed=None,
                              tokenizer=None, max_new_tokens=3, no_stop_at_eod=True, json=True)
    assert _generate(args, PROMPTS[:2], 0.8, 30, 0.95) == 0  # sampling: the seed is broadcast too
    return calls


@pytest.mark.timeout(60)
def test_sampled_generation_passes_its_tensors_on_the_run_device(checkpoint):
    """Issue 59 item 2: `trident generate --nproc` broadcast a CPU seed tensor whatever the device (NCCL
    refuses it); every collective of a sampled generation on tp2, audited."""
    from collective_fixtures import misplaced

    for calls in run_distributed(_audited_generation, 2, checkpoint, timeout=50):
        assert calls[0]["call"] == "broadcast" and misplaced(calls, "cpu") == []


def _cli_args(checkpoint) -> list[str]:
    args = ["generate", str(checkpoint), "--greedy", "--no-stop-at-eod", "--max-new-tokens", str(NEW), "--json",
            "--threads", "1"]
    for prompt in PROMPTS[:3]:
        args += ["--prompt", prompt]
    return args


@pytest.mark.timeout(150)
def test_cli_generates_on_two_ranks_what_one_process_does(checkpoint, reference, capfd):
    from trident.cli import main

    assert main([*_cli_args(checkpoint), "parallel.pp=2", "--nproc", "2"]) == 0  # the launcher, here; torchrun's ranks
    parallel = json.loads(capfd.readouterr().out)  # one JSON document: the other rank printed nothing
    assert parallel["layout"]["pp"] == 2
    assert [r["new_ids"] for r in parallel["results"]] == [ids for ids, *_ in reference[:3]]
    assert main(_cli_args(checkpoint)) == 0  # several prompts, one process: the same engine path
    assert [r["new_ids"] for r in json.loads(capfd.readouterr().out)["results"]] == [ids for ids, *_ in reference[:3]]
