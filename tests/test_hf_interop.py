"""Hugging Face interop: a trained trident checkpoint exported as GPT-2 loads in `transformers` with
the same logits; importing it back gives a trident checkpoint with identical logits that trains on;
a model made by transformers imports exactly; bad folders are refused with a reason."""
import json
import sys

import numpy as np
import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from train_fixtures import Windows
from trident.checkpoint.reader import load_for_inference
from trident.infer.hf_export import export_hf
from trident.infer.hf import (TransformersMissing, import_hf, name_map, qkv_from_gpt2, qkv_to_gpt2,
                              verify_export)


@pytest.fixture(scope="module")
def exported(trained_checkpoint, tmp_path_factory):  # noqa: F811
    path, tokenizer, text = trained_checkpoint
    out = tmp_path_factory.mktemp("hf") / "gpt2"
    summary = export_hf(path, out)
    return summary, out, tokenizer, text


def _batch(tokenizer, text, seq, rows=3):
    ids = tokenizer.encode(text)
    return torch.tensor([ids[i * seq:(i + 1) * seq] for i in range(rows)])


def test_qkv_reorder_is_gpt2_layout_and_invertible():
    heads, d, h = 4, 3, 12
    # trident row (head, part, i) holds the code 100*head + 10*part + i
    codes = torch.tensor([[100 * n + 10 * p + i] for n in range(heads) for p in range(3) for i in range(d)]).float()
    gpt2 = qkv_to_gpt2(codes.expand(3 * h, h), heads)
    for part in range(3):
        for n in range(heads):
            for i in range(d):
                assert gpt2[part * h + n * d + i, 0] == 100 * n + 10 * part + i
    weight = torch.randn(3 * h, h)
    assert torch.equal(qkv_from_gpt2(qkv_to_gpt2(weight, heads), heads), weight)
    assert torch.equal(qkv_from_gpt2(qkv_to_gpt2(weight[:, 0], heads), heads), weight[:, 0])


def test_export_files_and_gpt2_names(exported):
    summary, out, tokenizer, _ = exported
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == tokenizer.vocab_size == summary["vocab_size"]
    assert summary["dropped_padding_rows"] == summary["padded_vocab_size"] - tokenizer.vocab_size > 0
    assert config["activation_function"] == "gelu" and config["tie_word_embeddings"] is True
    assert (config["n_embd"], config["n_layer"], config["n_head"], config["n_positions"]) == (32, 2, 4, 32)
    with safe_open(out / "model.safetensors", framework="pt") as handle:
        keys = set(handle.keys())
        assert handle.metadata() == {"format": "pt"}
    assert keys == {g for _, g, _ in name_map(2)}
    weights = load_file(out / "model.safetensors")
    assert weights["transformer.wte.weight"].shape == (tokenizer.vocab_size, 32)
    assert weights["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)  # Conv1D: [in, out]
    assert weights["transformer.h.1.mlp.c_fc.weight"].shape == (32, 128)
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        assert (out / name).is_file()


@torch.no_grad()
def test_transformers_gives_trident_logits(trained_checkpoint, exported):  # noqa: F811
    summary, out, tokenizer, text = exported
    model, _, config = load_for_inference(trained_checkpoint[0])
    hf_model = transformers.GPT2LMHeadModel.from_pretrained(str(out)).eval()
    tokens = _batch(tokenizer, text, config.model.seq_length)
    ours = model(tokens)[..., : tokenizer.vocab_size]
    theirs = hf_model(input_ids=tokens).logits
    assert theirs.shape == ours.shape
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)
    assert ours.abs().max() > 1.0  # a trained model with real spread, not near-zero logits
    # transformers' own KV-cached greedy decoding continues the text as trident does
    from trident.infer.generate import generate_tokens

    prompt = tokens[0, :8]
    hf_ids = hf_model.generate(prompt[None], max_new_tokens=12, min_new_tokens=12, do_sample=False,
                               pad_token_id=tokenizer.eod_id)[0, 8:].tolist()
    ours_ids = generate_tokens(model, prompt.tolist(), 12, tokenizer.vocab_size, greedy=True, stop_at_eod=False).new_ids
    assert hf_ids == ours_ids
    # the exported tokenizer files load in transformers and tokenize identically
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    sample = "Return a new list of values, naïve café 🎉\n\tdone"
    assert hf_tok(sample)["input_ids"] == tokenizer.encode(sample)
    assert verify_export(trained_checkpoint[0], out)["max_abs_logit_diff"] <= 1e-5


@torch.no_grad()
def test_import_round_trip_has_identical_logits_and_trains_on(trained_checkpoint, exported, tmp_path):  # noqa: F811
    from trident.config import load_config
    from trident.train.trainer import Trainer

    summary, out, tokenizer, text = exported
    imported = import_hf(out, tmp_path / "back")
    original, _, config = load_for_inference(trained_checkpoint[0])
    model, back_tokenizer, back_config = load_for_inference(tmp_path / "back")
    vocab = tokenizer.vocab_size
    assert imported["padded_vocab_size"] == config.model.padded_vocab_size()  # padding hint carried in config.json
    assert back_tokenizer.encode(text[:500]) == tokenizer.encode(text[:500])
    tokens = _batch(tokenizer, text, config.model.seq_length)
    assert torch.equal(model(tokens)[..., :vocab], original(tokens)[..., :vocab])
    assert torch.count_nonzero(model.embedding.word.weight[vocab:]) == 0  # re-padded with zero rows
    for key in ("num_layers", "hidden_size", "num_heads", "seq_length", "vocab_size", "layernorm_epsilon"):
        assert getattr(back_config.model, key) == getattr(config.model, key), key
    # the imported checkpoint is a normal trident checkpoint: training resumes from it
    cfg = load_config("tiny", [f"checkpoint.load={tmp_path / 'back'}", "train.steps=1", "logging.log_interval=1000",
                               "model.make_vocab_size_divisible_by=64"])
    ids = np.array(tokenizer.encode(text), dtype=np.int64)
    with torch.enable_grad():
        trainer = Trainer(cfg, tmp_path / "finetune", datasets=(Windows(ids, 32), None), vocab_size=vocab,
                          log=lambda *a: None)
        assert torch.equal(dict(trainer.model.named_params)["blocks.1.mlp.fc2.weight"],
                           original.blocks["1"].mlp.fc2.weight)
        record = trainer.train_step()
    assert np.isfinite(record["loss"]) and record["loss"] < np.log(vocab)


@torch.no_grad()
@pytest.mark.parametrize("activation,trident_activation", [("gelu", "gelu"), ("gelu_new", "gelu_new"),
                                                           ("gelu_pytorch_tanh", "gelu_tanh")])
def test_model_made_by_transformers_imports_exactly(tmp_path, activation, trident_activation):
    # each HF activation is kept by name (gelu_new and gelu_pytorch_tanh round differently) and goes back as it came
    hf_config = transformers.GPT2Config(vocab_size=77, n_positions=24, n_embd=48, n_layer=2, n_head=3, n_inner=96,
                                        activation_function=activation, layer_norm_epsilon=1e-6,
                                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    hf_model = transformers.GPT2LMHeadModel(hf_config).eval()
    for param in hf_model.parameters():  # biases and norms are trivial at init; make every tensor count
        param.add_(torch.randn_like(param) * 0.05)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    summary = import_hf(tmp_path / "hf", tmp_path / "ckpt")
    assert summary["tokenizer"] is False and "no tokenizer" in summary["notes"][0]
    model, tokenizer, config = load_for_inference(tmp_path / "ckpt")
    assert tokenizer is None and config.model.ffn_hidden_size == 96 and config.model.padded_vocab_size() == 128
    assert config.model.activation == trident_activation
    tokens = torch.randint(0, 77, (2, 24), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(tokens)[..., :77], hf_model(input_ids=tokens).logits, rtol=0, atol=1e-5)
    export_hf(tmp_path / "ckpt", tmp_path / "back")  # and out again, with the activation it came in with
    back = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "back")).eval()
    assert back.config.activation_function == activation
    torch.testing.assert_close(back(input_ids=tokens).logits, hf_model(input_ids=tokens).logits, rtol=0, atol=1e-5)


def test_export_and_import_work_without_transformers(trained_checkpoint, tmp_path, monkeypatch, capsys):  # noqa: F811
    from trident.cli import main

    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    summary = export_hf(trained_checkpoint[0], tmp_path / "hf")
    assert summary["files"][:2] == ["config.json", "model.safetensors"]
    assert import_hf(tmp_path / "hf", tmp_path / "back")["vocab_size"] == summary["vocab_size"]
    with pytest.raises(TransformersMissing, match=r"pip install 'trident-lm\[hf\]'"):
        verify_export(trained_checkpoint[0], tmp_path / "hf")
    assert main(["export-hf", str(trained_checkpoint[0]), str(tmp_path / "hf2"), "--verify"]) == 1
    assert "transformers" in capsys.readouterr().err and (tmp_path / "hf2" / "model.safetensors").is_file()
    assert main(["import-hf", str(tmp_path / "hf2"), str(tmp_path / "back2"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"].endswith("step_0000000")
    assert main(["export-hf", str(trained_checkpoint[0]), str(tmp_path / "hf3"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vocab_size"] == summary["vocab_size"]


def test_sharded_and_unprefixed_weights_import_the_same(exported, tmp_path):
    _, out, _, _ = exported
    weights = load_file(out / "model.safetensors")
    folder = tmp_path / "sharded"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (folder / name).write_bytes((out / name).read_bytes())
    names = sorted(weights)
    # two shards, the second written as a bare GPT2Model would name its tensors (no "transformer.")
    shards = {"model-00001-of-00002.safetensors": {k: weights[k] for k in names[: len(names) // 2]},
              "model-00002-of-00002.safetensors": {k.removeprefix("transformer."): weights[k]
                                                   for k in names[len(names) // 2:]}}
    weight_map = {}
    for file, tensors in shards.items():
        save_file(tensors, folder / file, metadata={"format": "pt"})
        weight_map |= {key: file for key in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    import_hf(folder, tmp_path / "a")
    import_hf(out, tmp_path / "b")
    a, b = load_for_inference(tmp_path / "a")[0], load_for_inference(tmp_path / "b")[0]
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(x, y), name
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002.safetensors, which is missing"):
        import_hf(folder, tmp_path / "c")


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))


def test_bad_model_folders_are_refused(exported, tmp_path):
    import shutil

    _, out, _, _ = exported

    def copy(name):
        folder = tmp_path / name
        shutil.copytree(out, folder)
        return folder

    with pytest.raises(FileNotFoundError, match="no config.json"):
        import_hf(tmp_path, tmp_path / "x1")
    with pytest.raises(FileNotFoundError, match="neither a complete checkpoint"):
        export_hf(tmp_path, tmp_path / "x0")
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder"):
        export_hf(tmp_path / "absent", tmp_path / "x0")
    pickled = copy("pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(ValueError, match="never unpickles"):
        import_hf(pickled, tmp_path / "x2")
    relu = copy("relu")
    _edit_config(relu, activation_function="relu")
    with pytest.raises(ValueError, match="activation_function.*GeLU"):
        import_hf(relu, tmp_path / "x3")
    other = copy("t5")  # Llama folders import too (tests/test_llama_hf.py); other architectures do not
    _edit_config(other, model_type="t5")
    with pytest.raises(ValueError, match="model_type.*imports gpt2, llama, mistral, qwen2"):
        import_hf(other, tmp_path / "x5")
    wrong = copy("wrong_shape")
    _edit_config(wrong, n_positions=64)
    with pytest.raises(ValueError, match="transformer.wpe.weight.*shape"):
        import_hf(wrong, tmp_path / "x6")
    untied = copy("untied")
    weights = load_file(untied / "model.safetensors")
    weights["lm_head.weight"] = torch.randn_like(weights["transformer.wte.weight"])
    save_file(weights, untied / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        import_hf(untied, tmp_path / "x7")
    missing = copy("missing")
    weights = load_file(missing / "model.safetensors")
    del weights["transformer.h.1.mlp.c_fc.bias"]
    save_file(weights, missing / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(KeyError, match="transformer.h.1.mlp.c_fc.bias"):
        import_hf(missing, tmp_path / "x8")
    import_hf(out, tmp_path / "taken")
    with pytest.raises(FileExistsError, match="already holds checkpoints"):
        import_hf(out, tmp_path / "taken")
