"""A large export is written in safetensors shards with transformers' index, and loads the same."""
import json

import pytest
import torch
import transformers

from trident.checkpoint.reader import load_for_inference
from trident.infer.hf import import_hf
from trident.infer.hf_export import export_hf, plan_shards


def test_shards_hold_at_most_the_limit_and_keep_order():
    sizes = {"a": 40, "b": 30, "c": 100, "d": 10, "e": 25}
    assert plan_shards(sizes, 75) == [["a", "b"], ["c"], ["d", "e"]]  # a tensor over the limit goes alone
    assert plan_shards(sizes, 10**9) == [list(sizes)]


@pytest.mark.timeout(120)
def test_sharded_export_loads_in_transformers_and_imports_back(trained_checkpoint, tmp_path):  # noqa: F811
    path, tokenizer, text = trained_checkpoint
    whole = export_hf(path, tmp_path / "whole")
    sharded = export_hf(path, tmp_path / "sharded", max_shard_bytes=40_000)
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards == [f for f in sharded["files"] if f.startswith("model-")]
    assert index["metadata"]["total_size"] == 4 * whole["parameters"] == 4 * sharded["parameters"]
    for shard in shards:  # none over the limit unless it is one tensor alone; readable as any file (not 0600)
        assert (tmp_path / "sharded" / shard).stat().st_mode & 0o777 == 0o666 & ~_umask()
        size = (tmp_path / "sharded" / shard).stat().st_size
        assert size < 40_000 + 10_000 or list(index["weight_map"].values()).count(shard) == 1
    ids = torch.tensor([tokenizer.encode(text)[:32]])
    logits = [transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / name)).eval()(input_ids=ids).logits
              for name in ("whole", "sharded")]
    assert torch.equal(logits[0], logits[1])
    import_hf(tmp_path / "sharded", tmp_path / "back")
    back, original = load_for_inference(tmp_path / "back")[0], load_for_inference(path)[0]
    vocab = tokenizer.vocab_size  # the padding rows are dropped on export and zero on import
    for (name, x), (_, y) in zip(back.named_parameters(), original.named_parameters()):
        assert torch.equal(x[:vocab], y[:vocab]) if name == "embedding.word.weight" else torch.equal(x, y), name


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
