"""Starting from an open model (issue 56): random tiny GPT-2, Llama 2/3.2, Mistral and Qwen2 models made by
transformers are imported and exported exactly, continue training in one command with their own
tokenizer and no model key typed (one process, tp2 x pp2 and cp2), and come back out with the config
they came in with and logits equal to trident's; what would silently change the model is refused."""
import json

import pytest
import torch
import transformers

from distributed import run_distributed
from open_model_fixtures import (FAMILIES, architecture, logits_of, make_model, make_tokenizer, sample_tokens,
                                 write_corpus)
from trident.checkpoint.reader import complete_checkpoints, load_for_inference
from trident.cli import main
from trident.infer.hf import import_hf
from trident.infer.hf_export import export_hf

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _imported(family, root):
    hf_model, tokenizer = make_model(family, root / "hf")
    summary = import_hf(root / "hf", root / "ckpt")
    return hf_model, tokenizer, summary["checkpoint"]


def _assert_same_model(original, hf_dir, folder, checkpoint, atol):
    """The export in `folder` has the architecture of `original` (saved in `hf_dir`), its tokenizer files
    byte for byte, and logits equal to trident's on `checkpoint`."""
    back = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    assert architecture(back.config) == architecture(original.config)
    for name in TOKENIZER_FILES:
        assert (folder / name).read_bytes() == (hf_dir / name).read_bytes(), name
    model, _, _ = load_for_inference(checkpoint)
    tokens = sample_tokens(original.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[..., :original.config.vocab_size], logits_of(back, tokens),
                                   rtol=0, atol=atol)
    return back


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_import_then_export_is_exact(tmp_path, family):
    hf_model, _, checkpoint = _imported(family, tmp_path)
    model, tokenizer, config = load_for_inference(checkpoint)
    tokens = sample_tokens(hf_model.config.vocab_size)
    with torch.no_grad():
        ours = model(tokens)[..., :hf_model.config.vocab_size]
    torch.testing.assert_close(ours, logits_of(hf_model, tokens), rtol=0, atol=1e-5)
    assert tokenizer.eod_token == FAMILIES[family][2]  # the model's own end-of-text token separates documents
    export_hf(checkpoint, tmp_path / "back")
    back = _assert_same_model(hf_model, tmp_path / "hf", tmp_path / "back", checkpoint, atol=1e-5)
    torch.testing.assert_close(logits_of(back, tokens), logits_of(hf_model, tokens), rtol=0, atol=1e-5)
    assert "<|assistant|>" in transformers.AutoTokenizer.from_pretrained(str(tmp_path / "back")).apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


def _tokenize(corpus, prefix, tokenizer):
    assert main(["tokenize", "--input", str(corpus), "--output-prefix", str(prefix), "--tokenizer", str(tokenizer),
                 "--workers", "1"]) == 0


@pytest.mark.parametrize("family", ["gpt2", "llama3.2"])
def test_continued_pretraining_in_one_command(tmp_path, family, capsys):
    hf_model, _, checkpoint = _imported(family, tmp_path)
    _tokenize(write_corpus(tmp_path / "data"), tmp_path / "data" / "text", tmp_path / "ckpt")  # the model's tokenizer
    stats = json.loads((tmp_path / "data" / "text.stats.json").read_text())
    assert stats["tokenizer_fingerprint"] and stats["tokenizer"].endswith("tokenizer.json")
    code = main(["train", "tiny", f"checkpoint.load={checkpoint}", f"data.paths=[{tmp_path / 'data' / 'text'}]",
                 "train.steps=2", "--out", str(tmp_path / "run")])  # no model key: the checkpoint's model
    assert code == 0, capsys.readouterr().err
    trained = complete_checkpoints(tmp_path / "run" / "checkpoints")[-1]
    for name in TOKENIZER_FILES:  # the model's tokenizer travels with its checkpoints
        assert (trained / name).read_bytes() == (tmp_path / "hf" / name).read_bytes()
    assert main(["export-hf", str(trained), str(tmp_path / "back")]) == 0
    back = _assert_same_model(hf_model, tmp_path / "hf", tmp_path / "back", trained, atol=1e-4)
    tokens = sample_tokens(hf_model.config.vocab_size)
    assert not torch.allclose(logits_of(back, tokens), logits_of(hf_model, tokens), atol=1e-3)  # it did train


def _parallel_runs(rank, world, cases):
    from trident.checkpoint.model_config import adopt_checkpoint_model
    from trident.config import given_model_keys, load_config
    from trident.train.trainer import Trainer

    for checkpoint, prefix, out, layout in cases:
        overrides = [f"checkpoint.load={checkpoint}", f"data.paths=[{prefix}]", "train.steps=2", "parallel.timeout_s=60",
                     *layout]
        config = load_config("tiny", overrides)
        adopt_checkpoint_model(config, given_model_keys("tiny", overrides), f"{out}/checkpoints")
        trainer = Trainer(config, out, log=lambda *a: None)
        while trainer.step < 2:
            trainer.train_step()
        trainer.save(blocking=True)
    return True


@pytest.mark.timeout(240)
def test_continued_pretraining_at_tp2_pp2_and_cp2(tmp_path):
    cases, models = [], {}
    for family, layout in (("llama3.2", ["parallel.tp=2", "parallel.pp=2"]),
                           ("qwen2", ["parallel.cp=2", "parallel.dp=2"])):
        root = tmp_path / family
        hf_model, _, checkpoint = _imported(family, root)
        _tokenize(write_corpus(root / "data"), root / "data" / "text", checkpoint)
        cases.append((checkpoint, str(root / "data" / "text"), str(root / "run"), layout))
        models[family] = hf_model
    run_distributed(_parallel_runs, 4, cases, timeout=220)
    for family, hf_model in models.items():
        trained = complete_checkpoints(tmp_path / family / "run" / "checkpoints")[-1]
        export_hf(trained, tmp_path / family / "back")
        _assert_same_model(hf_model, tmp_path / family / "hf", tmp_path / family / "back", trained, atol=1e-4)


def _train(tmp_path, checkpoint, *overrides, prefix="text"):
    return main(["train", "tiny", f"checkpoint.load={checkpoint}", f"data.paths=[{tmp_path / 'data' / prefix}]",
                 "train.steps=1", *overrides, "--out", str(tmp_path / "run")])


def test_what_would_change_the_model_is_refused_before_any_step(tmp_path, capsys):
    _, tokenizer, checkpoint = _imported("gpt2", tmp_path)
    other = make_tokenizer(FAMILIES["gpt2"][2], seed_shift=3)  # the same size, other ids
    assert len(other) == len(tokenizer) and other.get_vocab() != tokenizer.get_vocab()
    other.save_pretrained(str(tmp_path / "other"))
    _tokenize(write_corpus(tmp_path / "data"), tmp_path / "data" / "text", tmp_path / "other")
    capsys.readouterr()
    assert _train(tmp_path, checkpoint) == 2
    err = capsys.readouterr().err
    assert "another tokenizer than the model's" in err and str(tmp_path / "other") in err and "fingerprint" in err
    assert _train(tmp_path, checkpoint, f"data.tokenizer={tmp_path / 'other'}") == 2
    assert "config key 'data.tokenizer'" in capsys.readouterr().err
    _tokenize(tmp_path / "data" / "corpus.jsonl", tmp_path / "data" / "own", checkpoint)
    for override, key in (("model.hidden_size=64", "'model.hidden_size': 64 contradicts"),
                          ("model.activation=gelu", "'model.activation': 'gelu' contradicts")):
        assert _train(tmp_path, checkpoint, override, prefix="own") == 2
        err = capsys.readouterr().err
        assert key in err and ("hidden_size=32" in err or "activation='gelu_new'" in err)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing ran


def test_mistral_window_and_old_checkpoints_are_refused_by_key(tmp_path, capsys):
    _, _, checkpoint = _imported("mistral", tmp_path)
    _tokenize(write_corpus(tmp_path / "data"), tmp_path / "data" / "text", checkpoint)
    capsys.readouterr()
    assert _train(tmp_path, checkpoint, "model.seq_length=64") == 2  # longer than its window of 32
    assert "model.sliding_window" in capsys.readouterr().err
    state_file = tmp_path / "ckpt" / "step_0000000" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["config"]  # as a checkpoint that stored no config
    state_file.write_text(json.dumps(state))
    assert _train(tmp_path, checkpoint) == 2
    assert "config key 'checkpoint.load'" in capsys.readouterr().err
