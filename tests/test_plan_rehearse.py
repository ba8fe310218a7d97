"""`trident plan` models what trident's trainer does: on small user-like layouts (tensor, sequence,
pipeline, interleaved and data parallelism; ZeRO-1, -2 and -3; bf16 and fp32; no, selective and full
recomputation; GPT and Llama-style blocks) the planned memory of a rank agrees within 10% with what `trident rehearse` measures
when the real training code runs that rank, per category and in total (peak vs the plan's total)."""

import pytest

from trident.config import load_config
from trident.hardware import clean_process_context
from trident.rehearse.run import rehearse

# Shapes shrunk from the presets so that a rank rehearses in seconds; the layouts are the users'.
SMALL = ["model.hidden_size=256", "model.num_heads=4", "model.seq_length=512", "model.vocab_size=8000",
         "train.rampup_batch_size=null"]
LAYOUTS = {
    "tp2 pp2 dp2, sequence parallel, ZeRO-3, selective, bf16": (
        "gpt-125m", ["model.num_layers=4", "parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true",
                     "parallel.zero_stage=3", "train.activation_checkpointing=selective",
                     "train.global_batch_size=24", "train.micro_batch_size=4"], 8, [0, 2]),
    "dp4, fp32, no recompute, dropout": (  # Megatron's dropout: on the CPU, SDPA's math path (fp32 scores)
        "gpt-125m", ["model.num_layers=4", "model.hidden_dropout=0.1", "model.attention_dropout=0.1",
                     "train.precision=fp32", "train.activation_checkpointing=none",
                     "train.global_batch_size=16", "train.micro_batch_size=4"], 4, [0]),
    "pp4 interleaved v2, full recompute, bf16": (
        "gpt-125m", ["model.num_layers=8", "parallel.pp=4", "parallel.schedule=interleaved",
                     "parallel.virtual_stages=2", "train.activation_checkpointing=full",
                     "train.global_batch_size=8", "train.micro_batch_size=2"], 4, [0, 3]),
    "Llama-style (GQA, RoPE, SwiGLU, RMSNorm) tp2 pp2 dp2, sequence parallel, ZeRO-2, no recompute, bf16": (
        "llama-7b", ["model.num_layers=4", "model.num_heads=8", "model.num_kv_heads=2", "model.ffn_hidden_size=688",
                     "parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true", "parallel.zero_stage=2",
                     "train.activation_checkpointing=none", "train.global_batch_size=24",
                     "train.micro_batch_size=4"], 8, [0]),
    "tp4 dp2, ZeRO-1, full recompute, bf16": (
        "gpt-1.3b", ["model.num_layers=4", "parallel.tp=4", "parallel.zero_stage=1",
                     "train.activation_checkpointing=full", "train.global_batch_size=8", "train.micro_batch_size=2"],
        8, [0]),
}
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "buffers")


@pytest.fixture(scope="module")
def pool():
    """Two worker processes (this machine's cores) that rehearse every rank of the module in turn."""
    with clean_process_context(("trident.rehearse.rank",)).Pool(2) as workers:
        yield workers


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_plan_agrees_with_the_rehearsal_within_10_percent(name, pool):
    preset, overrides, gpus, ranks = LAYOUTS[name]
    config = load_config(preset, SMALL + overrides)
    config.validate(gpus)
    for result in rehearse(config, gpus, ranks, pool=pool)["ranks"]:
        measured, plan = result["measured"], result["plan"]
        where = (name, result["rank"], result["stage"])
        for category in CATEGORIES:
            if plan[category] == 0:  # e.g. no reduction buffers without ZeRO: a few bytes of scalars
                assert measured[category] < 0.001 * plan["total"], (*where, category, measured[category])
            else:
                assert measured[category] / plan[category] == pytest.approx(1, abs=0.10), (*where, category)
        assert measured["peak"] / plan["total"] == pytest.approx(1, abs=0.10), where
