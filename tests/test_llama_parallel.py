"""Llama-style blocks in every layout, against one process (as tests/test_tensor_parallel.py and
tests/test_pipeline_parallel.py for GPT): per-step losses and the final full weights after 3 steps
with a batch ramp-up, for grouped-query (key/value heads sharded at tp=2, replicated at tp=4) and
multi-query attention; with sequence parallelism, every pipeline schedule (GPipe, 1F1B,
interleaved, ZB-H1, ZB-H2), ZeRO-1, -2 and -3 and activation checkpointing. Then a checkpoint saved at tp=2 x pp=2
continues on one process exactly as the uninterrupted run. One 4-rank process group for all cases."""
import numpy as np
import pytest

from distributed import run_distributed
from train_fixtures import LLAMA, MQA, RAMP, STOP, assert_matches, run_steps, tiny_config, train_full
from trident.checkpoint.reader import complete_checkpoints

# tp=4's collectives, per layer and micro-batch, cost the most on 2 cores: its case runs 2 layers (the others
# keep 4) and micro-batches of 4 (2 then 4 of them: the ramp still changes their number), against its own reference
SMALL = ["model.num_layers=2", "train.micro_batch_size=4"]
CASES = {
    "gqa tp4 (kv replicated) + sp": ([*LLAMA, *SMALL], ["parallel.tp=4", "parallel.sequence_parallel=true"]),
    "gqa tp2 (kv sharded) x pp2 1f1b + sp": (LLAMA, ["parallel.tp=2", "parallel.pp=2", "parallel.schedule=1f1b",
                                                     "parallel.sequence_parallel=true"]),
    "gqa pp2 interleaved x dp2 zero3 + selective": (LLAMA, [
        "parallel.pp=2", "parallel.dp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2",
        "parallel.zero_stage=3", "train.activation_checkpointing=selective"]),
    "mqa tp2 x pp2 zb-h1": (MQA, ["parallel.tp=2", "parallel.pp=2", "parallel.schedule=zb-h1"]),
    "mqa tp2 x dp2 zero1 + full": (MQA, ["parallel.tp=2", "parallel.dp=2", "parallel.zero_stage=1",
                                         "train.activation_checkpointing=full"]),
    "gqa pp4 gpipe": (LLAMA, ["parallel.pp=4", "parallel.schedule=gpipe"]),
    "mqa pp2 zb-h2 x dp2 zero3": (MQA, ["parallel.pp=2", "parallel.dp=2", "parallel.schedule=zb-h2",
                                        "parallel.zero_stage=3"]),
    # ZeRO-3 under every schedule (1F1B: tests/test_parallel_data.py), with SP and activation checkpointing
    "mqa tp2 x dp2 zero3 + sp + full": (MQA, ["parallel.tp=2", "parallel.dp=2", "parallel.zero_stage=3",
                                              "parallel.sequence_parallel=true",
                                              "train.activation_checkpointing=full"]),
    "mqa pp2 gpipe x dp2 zero3": (MQA, ["parallel.pp=2", "parallel.dp=2", "parallel.schedule=gpipe",
                                        "parallel.zero_stage=3"]),
    "gqa pp2 zb-h1 x dp2 zero3": (LLAMA, ["parallel.pp=2", "parallel.dp=2", "parallel.schedule=zb-h1",
                                          "parallel.zero_stage=3"]),
}
SAVED_AT = ["parallel.tp=2", "parallel.pp=2"]


def _every_case(rank, world, out_dir):
    results = {name: train_full(tiny_config(*RAMP, *model, *layout), f"{out_dir}/{i}/r{rank}")
               for i, (name, (model, layout)) in enumerate(CASES.items())}
    results["saved"] = run_steps([*MQA, *SAVED_AT], f"{out_dir}/saved", stop=STOP)
    return results


@pytest.mark.timeout(300)
def test_llama_blocks_match_one_process_in_every_layout(tmp_path):
    models = sorted({tuple(model) for model, _ in CASES.values()})
    references = {model: train_full(tiny_config(*RAMP, *model), tmp_path / f"reference{i}")
                  for i, model in enumerate(models)}
    ranks = run_distributed(_every_case, 4, str(tmp_path / "layouts"), timeout=280)
    for name, (model, _) in CASES.items():
        assert_matches([r[name] for r in ranks], references[tuple(model)])
    # resharding: tp2 x pp2 checkpoint -> one process; the continued losses are the uninterrupted ones
    whole = run_steps(MQA, tmp_path / "whole")
    path = complete_checkpoints(tmp_path / "layouts" / "saved" / "ckpt")[-1]
    second = run_steps(MQA, tmp_path / "resumed", load=str(path))
    np.testing.assert_allclose(ranks[-1]["saved"] + second, whole, rtol=1e-5)
