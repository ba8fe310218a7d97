"""Checkpoint loading refuses what it cannot vouch for (leftover tensors, undigested or out-of-folder
files), `checkpoint.load=auto` falls back past a damaged newest checkpoint, and `trident train`
ends every bad-input failure in one line and a non-zero exit."""
import json
import shutil

import pytest

from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.checkpoint.integrity import CheckpointError
from trident.checkpoint.reader import CheckpointReader, complete_checkpoints, load_for_inference
from trident.parallel.state import weight_pieces


def _train(tmp_path, *overrides, steps=1, log=lambda *a: None):
    from trident.train.trainer import Trainer

    config = tiny_config(f"train.steps={steps}", f"checkpoint.dir={tmp_path}", *overrides)
    trainer = Trainer(config, tmp_path, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=log)
    trainer.train()
    return trainer


@pytest.fixture
def saved(tmp_path):
    _train(tmp_path / "ckpt")
    return complete_checkpoints(tmp_path / "ckpt")[-1]


def _edit_manifest(saved, change):
    path = saved / "manifest-rank0.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_leftover_tensors_are_refused_unless_a_partial_load_is_asked_for(saved, tmp_path):
    from trident.model.gpt import GPT
    from trident.train.trainer import Trainer

    with pytest.raises(CheckpointError, match="blocks.1.*this model has no such parameter"):
        Trainer(tiny_config("model.num_layers=1", f"checkpoint.load={saved}"), tmp_path / "other",
                datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    config = tiny_config("model.num_layers=1")
    model = GPT(config.model, CheckpointReader(saved).full_shape("embedding.word.weight")[0])
    with pytest.raises(CheckpointError, match="blocks.1"):
        CheckpointReader(saved).fill(weight_pieces(list(model.named_parameters())))
    CheckpointReader(saved).fill(weight_pieces(list(model.named_parameters())), strict=False)


def test_load_for_inference_refuses_a_checkpoint_with_extra_tensors(saved):
    state = saved / "trainer_state.json"
    data = json.loads(state.read_text())
    data["config"]["model"]["num_layers"] = 1  # the saved config claims fewer layers than the files hold
    state.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="blocks.1"):
        load_for_inference(saved)


def test_manifest_without_file_digests_is_refused(saved):
    _edit_manifest(saved, lambda data: data.pop("files"))
    with pytest.raises(CheckpointError, match="manifest-rank0.json.*files"):
        CheckpointReader(saved)


def test_tensor_file_missing_from_the_digests_is_refused(saved):
    _edit_manifest(saved, lambda data: data["files"].pop("model-dp0-pp0-tp0.safetensors"))
    with pytest.raises(CheckpointError, match="model-dp0-pp0-tp0.safetensors.*no size and digest"):
        CheckpointReader(saved)


@pytest.mark.parametrize("name", ["../outside.safetensors", "/tmp/outside.safetensors", "sub/x.safetensors", ".."])
@pytest.mark.parametrize("where", ["tensors", "files"])
def test_file_names_outside_the_folder_are_refused(saved, name, where):
    def change(data):
        if where == "tensors":
            data["tensors"][0]["file"] = name
        else:
            data["files"][name] = data["files"]["model-dp0-pp0-tp0.safetensors"]
    _edit_manifest(saved, change)
    with pytest.raises(CheckpointError, match="not a plain file name"):
        CheckpointReader(saved)


def _corrupt(checkpoint):
    shard = checkpoint / "model-dp0-pp0-tp0.safetensors"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


def test_auto_resume_falls_back_to_the_newest_checkpoint_that_verifies(tmp_path):
    _train(tmp_path / "ckpt", "checkpoint.save_interval=1", steps=2)
    step1, step2 = complete_checkpoints(tmp_path / "ckpt")
    _corrupt(step2)
    lines = []
    trainer = _train(tmp_path / "ckpt", "checkpoint.load=auto", steps=3, log=lines.append)
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 1 and "step_0000002" in skipped[0] and "corrupted" in skipped[0]
    assert any(f"resumed from {step1}" in line for line in lines) and trainer.step == 3


def test_auto_resume_with_no_intact_checkpoint_fails_clearly(tmp_path):
    _train(tmp_path / "ckpt")
    _corrupt(complete_checkpoints(tmp_path / "ckpt")[-1])
    with pytest.raises(CheckpointError, match="no checkpoint under .* verifies"):
        _train(tmp_path / "ckpt", "checkpoint.load=auto", steps=2)


def test_an_explicit_checkpoint_that_fails_to_verify_is_not_replaced(tmp_path):
    _train(tmp_path / "ckpt", "checkpoint.save_interval=1", steps=2)
    newest = complete_checkpoints(tmp_path / "ckpt")[-1]
    _corrupt(newest)
    with pytest.raises(CheckpointError, match="step_0000002.*corrupted"):
        _train(tmp_path / "other", f"checkpoint.load={newest}", steps=3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from trident.data.build import tokenize_files
    from trident.data.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("strict")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    lines = [json.dumps({"text": " ".join(words[(i * 7 + j) % len(words)] for j in range(60))}) for i in range(80)]
    (root / "c.jsonl").write_text("\n".join(lines) + "\n")
    (root / "empty.jsonl").write_text("")
    train_tokenizer([root / "c.jsonl"], 300, root / "tok.json")
    tokenize_files([root / "c.jsonl"], root / "data", root / "tok.json", progress=False)
    tokenize_files([root / "empty.jsonl"], root / "empty", root / "tok.json", progress=False)
    (root / "a-file").write_text("")
    return root


def _cli(corpus, tmp_path, *overrides):
    from trident.cli import main

    return main(["train", "tiny", f"data.tokenizer={corpus / 'tok.json'}", "train.steps=2", *overrides,
                 "--out", str(tmp_path / "run")])


@pytest.mark.parametrize("overrides,message", [
    (["data.paths=[{c}/nope]"], "nope.idx: missing"),
    (["data.paths=[{c}/empty]"], "empty: indexed dataset has no documents"),
    (["data.paths=[{c}/data]", "checkpoint.dir={c}/a-file/ckpt"], "checkpoint.*a-file/ckpt"),
    (["data.paths=[{c}/data]", "checkpoint.dir={c}/a-file/ckpt", "checkpoint.async_save=true"], "a-file/ckpt"),
    (["data.paths=[{c}/data]", "checkpoint.load={c}/no-such-checkpoint"], "no-such-checkpoint"),
])
def test_train_ends_bad_input_in_one_line_and_a_nonzero_exit(corpus, tmp_path, capsys, overrides, message):
    code = _cli(corpus, tmp_path, *(o.format(c=corpus) for o in overrides))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith("error: "), err
    assert "Traceback" not in err[0]
    import re
    assert re.search(message, err[0]), err[0]


def test_train_with_a_corrupt_explicit_checkpoint_exits_with_one_line(corpus, tmp_path, capsys):
    assert _cli(corpus, tmp_path, f"data.paths=[{corpus / 'data'}]") == 0
    newest = complete_checkpoints(tmp_path / "run" / "checkpoints")[-1]
    copy = tmp_path / "copy"
    shutil.copytree(newest, copy)
    _corrupt(copy)
    capsys.readouterr()
    code = _cli(corpus, tmp_path / "again", f"data.paths=[{corpus / 'data'}]", f"checkpoint.load={copy}")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "corrupted" in err[0], err


class VanishedValidation(RandomTokens):
    def __getitem__(self, i):
        raise OSError(f"/data/valid.bin: read failed at sample {i}")


def test_a_failed_validation_is_one_clear_error(tmp_path):
    from trident.train.trainer import Trainer, TrainError

    trainer = Trainer(tiny_config("train.steps=2", "train.eval_interval=1", "train.eval_iters=1"), tmp_path,
                      datasets=(RandomTokens(32), VanishedValidation(32)), vocab_size=VOCAB, log=lambda *a: None)
    with pytest.raises(TrainError, match="validation at step 1: /data/valid.bin: read failed"):
        trainer.train()
