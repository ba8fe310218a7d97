"""The transformers adapter goes through the same scoring code: a tiny random GPT-2 (no download)."""
from __future__ import annotations

import json
import sys

import pytest
import torch
import transformers  # part of the dev extra; these tests must run, not skip

from eval_fixtures import FIXTURES, tiny_tokenizer
from trident.cli import main
from trident.evaluate.harness import run_evaluation
from trident.evaluate.lm import hf_lm, load_hf


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    tokenizer = tiny_tokenizer(tmp_path_factory.mktemp("tok"))
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=tokenizer.vocab_size, n_positions=96, n_embd=32, n_layer=2,
                                     n_head=4, bos_token_id=tokenizer.eod_id, eos_token_id=tokenizer.eod_id)
    model = transformers.GPT2LMHeadModel(config).eval()
    hf_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.hf, eos_token="<|endoftext|>")
    directory = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(directory)
    hf_tokenizer.save_pretrained(directory)
    return directory, model, hf_tokenizer, tokenizer


REQUESTS = [("Question: Cool hot soup\nAnswer:", " blow on the spoon."), ("Question: Cool hot soup\nAnswer:", " add salt."),
            ("The dog barked at the", " mailman"), ("", "The cat sat.")]


def test_saved_and_in_memory_models_score_alike_and_batching_does_not_matter(saved_gpt2):
    directory, model, hf_tokenizer, tokenizer = saved_gpt2
    loaded = load_hf(directory, batch_size=1)
    in_memory = hf_lm(model, hf_tokenizer, batch_size=4)
    assert loaded.describe()["kind"] == "transformers" and loaded.max_length == 96
    assert loaded.eod_id == tokenizer.eod_id and loaded.vocab_size == tokenizer.vocab_size
    a, b = loaded.loglikelihood(REQUESTS), in_memory.loglikelihood(REQUESTS)
    for (x, gx), (y, gy) in zip(a, b):
        assert x == pytest.approx(y, abs=1e-5) and gx == gy
    # the adapter's tokenisation is the trident tokenizer's (same tokenizer.json underneath)
    assert loaded.encode_pair("The dog barked at the", " mailman") == \
        (tuple(tokenizer.encode("The dog barked at the")), tuple(tokenizer.encode(" mailman")))


def test_cli_evaluates_a_hugging_face_directory(saved_gpt2, tmp_path, capsys):
    directory = saved_gpt2[0]
    code = main(["eval", "--hf", str(directory), "--tasks", "piqa,winogrande", "--shots", "0,1",
                 "--data-dir", str(FIXTURES), "--out", str(tmp_path), "--json"])
    assert code == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["model"]["architecture"] == "GPT2LMHeadModel"
    assert set(results["results"]) == {"piqa", "winogrande"}
    direct = run_evaluation(load_hf(directory), ["piqa"], [1], FIXTURES, None, progress=False)
    assert direct["results"]["piqa"]["1"]["metrics"] == pytest.approx(results["results"]["piqa"]["1"]["metrics"])


def test_missing_transformers_gives_an_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'trident-lm\[hf\]'"):
        load_hf(tmp_path)


def test_cli_needs_exactly_one_model(capsys):
    assert main(["eval", "--tasks", "piqa"]) == 2
    assert "exactly one of CKPT or --hf" in capsys.readouterr().err


def test_trident_checkpoint_and_its_hugging_face_export_score_alike(tmp_path):
    """Parity: the same weights evaluated directly and through `trident export-hf` (GPT-2 layout)."""
    from eval_fixtures import save_trident_checkpoint
    from trident.infer.hf_export import export_hf
    from trident.evaluate.lm import load_trident

    tokenizer = tiny_tokenizer(tmp_path)
    ckpt, _ = save_trident_checkpoint(tokenizer, tmp_path)
    export_hf(ckpt, tmp_path / "hf")
    direct, exported = load_trident(ckpt, batch_size=3), load_hf(tmp_path / "hf", batch_size=5)
    assert exported.vocab_size == direct.vocab_size and exported.max_length == direct.max_length
    for (a, ga), (b, gb) in zip(direct.loglikelihood(REQUESTS), exported.loglikelihood(REQUESTS)):
        assert a == pytest.approx(b, abs=1e-4) and ga == gb
    results = [run_evaluation(lm, ["piqa", "lambada"], [1], FIXTURES, None, progress=False)["results"]
               for lm in (direct, exported)]
    for task in ("piqa", "lambada"):
        for metric, value in results[0][task]["1"]["metrics"].items():
            assert results[1][task]["1"]["metrics"][metric] == pytest.approx(value, rel=1e-4), (task, metric)
