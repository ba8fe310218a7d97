"""Llama-style blocks downstream of the model: the FLOPs formula (MFU, planner) against a matmul-by-
matmul count with grouped-query attention and SwiGLU; `trident plan` on the 7B preset; the planner's
memory per rank against a rehearsal of the 7B preset (real training code, fake tensors) within 10%."""
import json
import subprocess
import sys

import pytest

from trident.config import load_config
from trident.flops import block_weights, iteration_flops, model_flops
from trident.hardware import clean_process_context
from trident.rehearse.run import rehearse


def _matmul(rows, inner, cols):
    return 2 * rows * inner * cols


def test_flops_count_every_llama_matmul():
    m = load_config("llama-tiny", ["model.hidden_size=64", "model.num_heads=8", "model.num_kv_heads=2",
                                   "model.ffn_hidden_size=96"]).model
    b, s, L, h, f, V, kv = 3, 16, m.num_layers, 64, 96, 512, 2 * 8  # kv: 2 key/value heads of 8
    tokens = b * s
    layer = (_matmul(tokens, h, h) + 2 * _matmul(tokens, h, kv) + _matmul(tokens, h, h)  # q, k, v, output
             + 2 * _matmul(tokens, h, f) + _matmul(tokens, f, h)  # gate, up, down
             + b * (_matmul(s, h, s) + _matmul(s, s, h)))  # scores, weighted values (all query heads)
    head = _matmul(tokens, h, V)
    expected = L * 4 * layer + 3 * head  # forward, backward (two forwards), recomputation of the layers
    assert iteration_flops(b, s, L, h, V, True, block_weights(m)) == pytest.approx(expected, rel=1e-12)
    assert model_flops(b, s, L, h, V, block_weights(m)) == pytest.approx(L * 3 * layer + 3 * head, rel=1e-12)
    gpt = load_config("tiny").model
    assert block_weights(gpt) == 12 * gpt.hidden_size**2  # the GPT formula unchanged


def test_plan_shows_the_7b_preset():
    done = subprocess.run([sys.executable, "-m", "trident", "plan", "llama-7b", "--gpus", "8", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    assert plan["ok"], plan
    assert plan["memory"]["params"] == pytest.approx(6_738_415_616, rel=1e-9)  # Llama 2 7B on one GPU (dp=8)


@pytest.mark.timeout(300)
def test_plan_and_rehearsal_agree_within_10_percent_on_the_7b_preset():
    # tp2 x pp4: first stage (embedding, 8 layers) and last stage (untied head, logits); one micro-batch
    # of 4 sequences of 4096 tokens each, as the preset's model trains them
    config = load_config("llama-7b", ["parallel.tp=2", "parallel.pp=4", "train.global_batch_size=4",
                                      "train.micro_batch_size=4"]).validate(8)
    # both ranks at once in a pool of two (as test_plan_rehearse does): the measured categories are the fake tensors'
    # not the process's resident memory, so a shared process changes none of them
    with clean_process_context(("trident.rehearse.rank",)).Pool(2) as pool:
        ranks = rehearse(config, 8, [0, 7], pool=pool)["ranks"]
    for rank in ranks:
        measured, plan = rank["measured"], rank["plan"]
        for category in ("weights", "gradients", "optimizer", "activations"):
            assert plan[category] == pytest.approx(measured[category], rel=0.10), (rank["rank"], category)
        assert plan["total"] == pytest.approx(measured["peak"], rel=0.10), rank["rank"]
    assert ranks[0]["parameters"] != ranks[1]["parameters"]  # embedding vs head + final norm
