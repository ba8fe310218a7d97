"""Hugging Face Llama interop: a LlamaForCausalLM made by transformers (no download) imports with
its logits and greedy continuation; exported back, every tensor is the original; a trained trident
Llama-style checkpoint exports as sharded safetensors (readable files) that transformers loads with
trident's logits, and scores alike on trident's evaluator; unsupported folders are refused by key."""
import json
import stat

import pytest
import torch
import transformers
from safetensors.torch import load_file

from trident.checkpoint.reader import load_for_inference
from trident.infer.hf import import_hf, read_hf_tensors, verify_export
from trident.infer.hf_export import export_hf

VOCAB = 77


def _llama(tmp_path, kv_heads=2, tie=False, bias=False, theta=500.0):
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=24,
                                      rms_norm_eps=1e-5, tie_word_embeddings=tie, attention_bias=bias, mlp_bias=bias,
                                      rope_parameters={"rope_type": "default", "rope_theta": theta})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms and biases are trivial at init; make every tensor count
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(str(tmp_path / "hf"))
    return model


@torch.no_grad()
@pytest.mark.parametrize("kv_heads,tie,bias", [(2, False, False), (1, False, False), (4, True, True)])
def test_model_made_by_transformers_imports_exactly_and_exports_back(tmp_path, kv_heads, tie, bias):
    hf_model = _llama(tmp_path, kv_heads, tie, bias)
    summary = import_hf(tmp_path / "hf", tmp_path / "ckpt")
    model, _, config = load_for_inference(tmp_path / "ckpt")
    m = config.model
    assert (m.position, m.norm, m.mlp, m.kv_heads, m.tie_embeddings, m.bias) == (
        "rope", "rmsnorm", "swiglu", kv_heads, tie, bias)
    assert m.rope_theta == 500.0 and summary["padded_vocab_size"] == 128
    tokens = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(tokens)[..., :VOCAB], hf_model(input_ids=tokens).logits, rtol=0, atol=1e-5)
    # KV-cached greedy decoding (grouped-query cache) continues as transformers' own
    from trident.infer.generate import generate_tokens

    prompt = tokens[0, :6]
    theirs = hf_model.generate(prompt[None], attention_mask=torch.ones(1, 6, dtype=torch.long), max_new_tokens=10,
                               min_new_tokens=10, do_sample=False, pad_token_id=0)[0, 6:].tolist()
    assert generate_tokens(model, prompt.tolist(), 10, VOCAB, greedy=True, stop_at_eod=False).new_ids == theirs
    export_hf(tmp_path / "ckpt", tmp_path / "back")
    original, back = read_hf_tensors(tmp_path / "hf", "model."), read_hf_tensors(tmp_path / "back", "model.")
    if tie:  # transformers writes the tied head once
        original.pop("lm_head.weight", None)
    assert back.keys() == original.keys()
    for name, tensor in original.items():
        assert torch.equal(back[name], tensor), name


@pytest.fixture(scope="module")
def exported(trained_llama_checkpoint, tmp_path_factory):
    path, tokenizer, text = trained_llama_checkpoint
    out = tmp_path_factory.mktemp("hf") / "llama"
    summary = export_hf(path, out, max_shard_bytes=40_000)  # a few shards, as a 7B's 5 GB ones
    return summary, out, tokenizer, text


def test_export_is_a_sharded_llama_folder_others_can_read(exported):
    summary, out, tokenizer, _ = exported
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["num_key_value_heads"], config["intermediate_size"]) == (2, 64)
    assert config["tie_word_embeddings"] is False
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards == sorted(f for f in summary["files"] if f.startswith("model-0"))
    for shard in shards:
        assert stat.S_IMODE((out / shard).stat().st_mode) & 0o044 == 0o044  # group/others may read (not 0600)
    weights = {k: v for shard in shards for k, v in load_file(out / shard).items()}
    assert weights.keys() == index["weight_map"].keys()
    assert weights["model.embed_tokens.weight"].shape == weights["lm_head.weight"].shape == (tokenizer.vocab_size, 32)
    assert weights["model.layers.1.self_attn.k_proj.weight"].shape == (16, 32)  # 2 kv heads x 8
    assert weights["model.layers.0.mlp.gate_proj.weight"].shape == (64, 32)


@torch.no_grad()
def test_transformers_gives_trident_logits_on_the_trained_model(trained_llama_checkpoint, exported):
    _, out, tokenizer, text = exported
    model, _, config = load_for_inference(trained_llama_checkpoint[0])
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert type(hf_model).__name__ == "LlamaForCausalLM"
    ids = tokenizer.encode(text)
    tokens = torch.tensor([ids[i * 32:(i + 1) * 32] for i in range(3)])
    ours = model(tokens)[..., :tokenizer.vocab_size]
    torch.testing.assert_close(hf_model(input_ids=tokens).logits, ours, rtol=0, atol=1e-5)
    assert ours.abs().max() > 1.0  # trained: real spread
    assert verify_export(trained_llama_checkpoint[0], out)["max_abs_logit_diff"] <= 1e-5


def test_trident_eval_scores_the_checkpoint_and_its_export_alike(trained_llama_checkpoint, exported):
    from eval_fixtures import FIXTURES
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_hf, load_trident

    direct, hf = load_trident(trained_llama_checkpoint[0], batch_size=3), load_hf(exported[1], batch_size=5)
    results = [run_evaluation(lm, ["piqa", "lambada"], [1], FIXTURES, None, progress=False)["results"]
               for lm in (direct, hf)]
    for task in ("piqa", "lambada"):
        for metric, value in results[0][task]["1"]["metrics"].items():
            assert results[1][task]["1"]["metrics"][metric] == pytest.approx(value, rel=1e-4), (task, metric)


@pytest.mark.timeout(300)
def test_lm_eval_harness_scores_the_export_as_trident_scores_the_checkpoint(trained_llama_checkpoint, exported,
                                                                           tmp_path):
    from eval_fixtures import HARNESS_MC_TASK, harness_results, write_harness_mc_data

    path, _, text = trained_llama_checkpoint
    (tmp_path / "tasks").mkdir()
    metrics = "  - metric: acc\n  - metric: acc_norm\n"
    data = write_harness_mc_data(tmp_path / "mc.jsonl", text)
    (tmp_path / "tasks" / "tiny_mc.yaml").write_text(HARNESS_MC_TASK.format(data=data, metrics=metrics))
    ours, theirs = (results["tiny_mc"] for results in harness_results(
        tmp_path / "tasks", ["tiny_mc"], [("trident", f"checkpoint={path}"), ("hf", f"pretrained={exported[1]}")]))
    numbers = {k: v for k, v in theirs.items() if isinstance(v, float) and "stderr" not in k}
    assert set(numbers) == {"acc,none", "acc_norm,none"}
    for metric, value in numbers.items():
        assert ours[metric] == pytest.approx(value, rel=1e-4), metric


def _edit(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_unsupported_llama_folders_and_models_are_refused(tmp_path):
    _llama(tmp_path)
    cases = [({"hidden_act": "gelu"}, "hidden_act"),
             ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}, "low_freq_factor"),
             ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 5e5, "factor": 8.0}}, "rope_parameters"),
             ({"attention_bias": True}, "mlp_bias"),
             ({"head_dim": 16}, "head_dim"),
             ({"num_key_value_heads": 3}, "model.num_kv_heads")]
    for i, (change, key) in enumerate(cases):
        _edit(tmp_path / "hf", **change)
        with pytest.raises(ValueError, match=key):
            import_hf(tmp_path / "hf", tmp_path / f"x{i}")
        _llama(tmp_path)  # fresh folder for the next case
    # a model no Hugging Face architecture computes (rotary positions with LayerNorm) is not exported
    from trident.config import load_config
    from trident.infer.hf_config import family_of

    mixed = load_config("llama-tiny", ["model.norm=layernorm"]).model
    with pytest.raises(ValueError, match="norm=layernorm"):
        family_of(mixed)
