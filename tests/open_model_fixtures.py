"""Tiny random open models made by transformers (nothing downloaded), each with a tokenizer of its own
saved as transformers saves one (tokenizer.json, tokenizer_config.json, chat template), and a small
corpus; the shapes of the families teams continue today (issue 56)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from train_fixtures import WORDS

CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "max_position_embeddings": 64}
# family -> (config class, its arguments, end-of-text token, extra embedding rows beyond the tokenizer)
FAMILIES = {
    "llama3.2": (transformers.LlamaConfig, SMALL | {  # GQA, llama3 frequency scaling, tied embeddings
        "num_key_value_heads": 2, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}, "<|end_of_text|>", 0),
    "llama2-linear": (transformers.LlamaConfig, SMALL | {  # multi-head, linear scaling, untied
        "num_key_value_heads": 4, "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
        "</s>", 0),
    "qwen2": (transformers.Qwen2Config, SMALL | {"num_key_value_heads": 2, "rope_parameters": {
        "rope_type": "default", "rope_theta": 1000000.0}}, "<|endoftext|>", 8),  # q/k/v biases, untied
    "qwen2-tied": (transformers.Qwen2Config, SMALL | {"num_key_value_heads": 2, "tie_word_embeddings": True},
                   "<|endoftext|>", 8),
    "mistral": (transformers.MistralConfig, SMALL | {"num_key_value_heads": 2, "sliding_window": 32}, "</s>", 0),
    "gpt2": (transformers.GPT2Config, {"n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4,
                                       "activation_function": "gelu_new"}, "<|endoftext|>", 0),
}
ARCHITECTURE = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings",
                "rms_norm_eps", "rope_parameters", "tie_word_embeddings", "attention_bias", "mlp_bias",
                "sliding_window", "use_sliding_window", "n_positions", "n_embd", "n_layer", "n_head", "n_inner",
                "activation_function", "layer_norm_epsilon", "scale_attn_weights", "architectures")


def corpus_text(documents: int = 60) -> list[str]:
    return [" ".join(WORDS[(i * 5 + j * (i % 3 + 1)) % len(WORDS)] for j in range(40)) + f" doc {i}."
            for i in range(documents)]


def make_tokenizer(eos: str, vocab: int = 300, seed_shift: int = 0) -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE trained here, wrapped and saved as transformers does; `seed_shift` rotates the
    training text so that another tokenizer of the same size gives other ids."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    texts = corpus_text()
    texts = [" ".join(t.split()[seed_shift:] + t.split()[:seed_shift]).upper() if seed_shift else t for t in texts]
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, special_tokens=[eos],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=eos, bos_token=eos)
    fast.chat_template = CHAT
    return fast


@torch.no_grad()
def make_model(family: str, folder: Path):
    """Save a random `family` model and its tokenizer into `folder`; (model, tokenizer)."""
    kind, arguments, eos, extra_rows = FAMILIES[family]
    tokenizer = make_tokenizer(eos)
    eos_id = tokenizer.convert_tokens_to_ids(eos)
    config = kind(vocab_size=len(tokenizer) + extra_rows, bos_token_id=eos_id, eos_token_id=eos_id, **arguments)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    for param in model.parameters():  # norms and biases are trivial at init; make every tensor count
        param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return model, tokenizer


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus_text()))
    return path


def architecture(config) -> dict:
    """The architecture fields of a transformers config (what must survive import and export)."""
    values = config.to_dict()
    return {key: values.get(key) for key in ARCHITECTURE}


@torch.no_grad()
def logits_of(hf_model, tokens: torch.Tensor) -> torch.Tensor:
    return hf_model(input_ids=tokens).logits


def sample_tokens(vocab: int, length: int = 32) -> torch.Tensor:
    return torch.randint(0, vocab, (2, length), generator=torch.Generator().manual_seed(1))
