"""A generation pass keeps its work on the device: the KV cache's bookkeeping is read from the plan on
the host (no .item() of a device tensor a step), and the next-token choice and float64 log-probabilities
are computed where the logits are, at one TP rank too. Run on the meta device, which holds no values:
any read of a device value by the host, or a copy of the logits to it, fails there."""
import pytest
import torch

from trident.config import ModelConfig
from trident.infer.engine import Engine
from trident.infer.kv_cache import StepRows
from trident.infer.plan import RowSpec, build_plan
from trident.model.gpt import build_model

VOCAB = 96


def _engine():
    cfg = ModelConfig(num_layers=2, hidden_size=32, num_heads=4, seq_length=32, vocab_size=VOCAB)
    return Engine.single(build_model(cfg, cfg.padded_vocab_size(1), seed=0, device="meta"), VOCAB, slots=3)


@pytest.mark.parametrize("top_n, echo", [(0, False), (2, False), (1, True)])
def test_prefill_and_decode_passes_run_on_the_meta_device(top_n, echo):
    engine = _engine()
    prefill = build_plan([RowSpec(0, [5, 6, 7], 0, top_n=top_n, echo=echo), RowSpec(2, [9], 0, top_n=top_n)], 32, 0)
    decode = build_plan([RowSpec(2, [11], 1, top_n=top_n), RowSpec(0, [12], 3, top_n=top_n)], 32, 0)
    for plan in (prefill, decode):
        logits = engine._forward(plan)
        table = engine._choose(plan, logits, None)
        assert table.device.type == "meta" and table.shape == (2, plan.out_width, 2 + 2 * top_n)
    layer = engine.caches[0].layers[0]
    assert layer.k.device.type == "meta" and layer.k.shape[2] >= 4  # grew to the longest row on the host's word


def test_step_rows_read_lengths_and_slot_blocks_on_the_host():
    rows = StepRows(torch.tensor([4, 5, 6]), torch.tensor([[7, 8], [2, 3], [0, 1]]), "meta")
    assert rows.length == 9 and rows.block == slice(4, 7)
    assert rows.slots.device.type == rows.positions.device.type == rows.visible.device.type == "meta"
    assert StepRows(torch.tensor([2, 0]), torch.tensor([[3], [1]]), "meta").block is None
