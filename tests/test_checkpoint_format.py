"""Format 2 stores every value once (bf16 weights + fp32 masters and Adam state: 14 bytes a
parameter; fp32: 12), eval/export see the same weights as with format 1, and a format-1 checkpoint
(fp32 weights beside the masters, whole-file digests) still loads and resumes exactly."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.checkpoint.integrity import file_digest
from trident.checkpoint.reader import complete_checkpoints, load_for_inference


def _train(out_dir, precision, steps, load=""):
    from trident.train.trainer import Trainer

    config = tiny_config(f"train.precision={precision}", f"train.steps={steps}", f"checkpoint.load={load}",
                         f"checkpoint.dir={out_dir}/ckpt")
    trainer = Trainer(config, out_dir, datasets=(RandomTokens(config.model.seq_length), None), vocab_size=VOCAB,
                      log=lambda *a: None)
    losses = [trainer.train_step()["loss"] for _ in range(steps - trainer.step)]
    trainer.save()
    return trainer, losses


def _tensor_bytes(path):
    """{kind: bytes} of every tensor the manifests list, and the dtype of each kind."""
    sizes, dtypes = {}, {}
    for manifest in path.glob("manifest-rank*.json"):
        for entry in json.loads(manifest.read_text())["tensors"]:
            sizes[entry["kind"]] = sizes.get(entry["kind"], 0) + entry["span"][1] - entry["span"][0]
            dtypes.setdefault(entry["kind"], set()).add(entry["dtype"])
    return sizes, dtypes


@pytest.mark.parametrize("precision,per_param,weights", [("bf16", 14, "BF16"), ("fp32", 12, "F32")])
def test_every_value_is_stored_once(precision, per_param, weights, tmp_path):
    trainer, _ = _train(tmp_path, precision, 1)
    sizes, dtypes = _tensor_bytes(complete_checkpoints(tmp_path / "ckpt")[-1])
    parameters = sum(p.numel() for _, p in trainer.model.named_params)
    assert dtypes["model"] == {weights} and dtypes["exp_avg"] == dtypes["exp_avg_sq"] == {"F32"}
    assert ("master" in sizes) == (precision == "bf16")  # an fp32 run's weights are its masters
    assert sum(sizes.values()) == per_param * parameters


def to_format1(path):
    """Rewrite a checkpoint as format 1 wrote it: fp32 weights, entries without spans or tile
    digests, whole-file digests, no format_version."""
    for manifest_path in path.glob("manifest-rank*.json"):
        manifest = json.loads(manifest_path.read_text())
        for name in manifest["files"]:
            if name.startswith("model-"):
                save_file({k: v.float() for k, v in load_file(path / name).items()}, path / name)
            manifest["files"][name] = file_digest(path / name)
        for entry in manifest["tensors"]:
            for key in ("span", "dtype", "tile", "digests"):
                entry.pop(key)
        manifest.pop("format_version")
        manifest_path.write_text(json.dumps(manifest))
    state = json.loads((path / "trainer_state.json").read_text())
    state.pop("format_version")
    (path / "trainer_state.json").write_text(json.dumps(state))


@pytest.mark.timeout(120)
def test_eval_reads_the_trained_weights_as_format_1_did_and_format_1_resumes_exactly(tmp_path):
    trainer, _ = _train(tmp_path / "run", "bf16", 2)
    saved = complete_checkpoints(tmp_path / "run" / "ckpt")[-1]
    old = tmp_path / "old" / saved.name
    shutil.copytree(saved, old)
    to_format1(old)
    (old / "COMPLETE").write_text("2")
    model, _, _ = load_for_inference(saved)
    old_model, _, _ = load_for_inference(old)
    live = dict(trainer.model.named_params)
    for name, param in model.named_parameters():
        # eval/export see the weights the model trained with (bf16, exactly widened), as format 1 stored them
        assert torch.equal(param, live[name].float()) and torch.equal(param, dict(old_model.named_parameters())[name])
    _, new_losses = _train(tmp_path / "new", "bf16", 4, load=str(saved))
    _, old_losses = _train(tmp_path / "again", "bf16", 4, load=str(old))
    assert new_losses == old_losses and len(new_losses) == 2
