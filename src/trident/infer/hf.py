"""Hugging Face interop: a trident checkpoint <-> a `transformers` GPT-2 model folder (Llama-style
models: LlamaForCausalLM, whose tensor mapping is infer/hf_llama.py; import dispatches on model_type).

trident's GPT is GPT-2's architecture (with exact GeLU, or the tanh approximation original GPT-2
used: model.activation), so the conversion is only renaming, transposing and reordering:
  * GPT-2's Conv1D stores weights [in, out]; trident's linears (like nn.Linear) store [out, in].
  * trident's fused QKV rows are ordered (head, q|k|v, head_dim) so a tensor-parallel row slice holds
    whole heads; GPT-2's c_attn columns are [q of all heads | k of all heads | v of all heads].
  * trident pads the vocabulary (Megatron style); the export keeps only the tokenizer's rows and the
    import pads again with zero rows (never sampled or scored: both drop ids >= the vocabulary).
Both directions read and write safetensors + JSON only; nothing is unpickled, and neither needs
`transformers` installed. Only `verify_export` (an optional check) imports it.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open

from trident.infer.hf_config import HF_CONFIG, model_type, trident_config
from trident.infer.hf_llama import llama_from_hf, llama_tensors
from trident.text.storage import location, require_local

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
SAMPLE_TEXT = ("The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of "
               "times; def main(argv=None):\n    return 0\n")


class TransformersMissing(ImportError):
    """`transformers` is needed for this step but is not installed."""


def require_transformers():
    """The `transformers` module, or TransformersMissing saying how to install it."""
    try:
        import transformers
    except ImportError as err:
        raise TransformersMissing("this step loads the model in Hugging Face `transformers`, which is not "
                                  "installed: pip install 'trident-lm[hf]' (or 'transformers>=4.40'). "
                                  "export-hf and import-hf themselves do not need it.") from err
    return transformers


# ---- the tensor mapping (pure functions) ----------------------------------------------------------
def qkv_to_gpt2(tensor: torch.Tensor, num_heads: int) -> torch.Tensor:
    """trident QKV weight [3h, h] (or bias [3h]), rows (head, q|k|v, d) -> rows (q|k|v, head, d)."""
    rest = tensor.shape[1:]
    return tensor.reshape(num_heads, 3, -1, *rest).transpose(0, 1).reshape(tensor.shape)


def qkv_from_gpt2(tensor: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Inverse of qkv_to_gpt2: rows (q|k|v, head, d) -> rows (head, q|k|v, d)."""
    rest = tensor.shape[1:]
    return tensor.reshape(3, num_heads, -1, *rest).transpose(0, 1).reshape(tensor.shape)


def _block_names(i: int) -> list[tuple[str, str, str]]:
    """(trident name, GPT-2 name, kind) for block i; kind says how the tensor is converted."""
    t, g = f"blocks.{i}.", f"transformer.h.{i}."
    return [(t + "ln1.weight", g + "ln_1.weight", "copy"), (t + "ln1.bias", g + "ln_1.bias", "copy"),
            (t + "attention.qkv.weight", g + "attn.c_attn.weight", "qkv_weight"),
            (t + "attention.qkv.bias", g + "attn.c_attn.bias", "qkv_bias"),
            (t + "attention.proj.weight", g + "attn.c_proj.weight", "linear"),
            (t + "attention.proj.bias", g + "attn.c_proj.bias", "copy"),
            (t + "ln2.weight", g + "ln_2.weight", "copy"), (t + "ln2.bias", g + "ln_2.bias", "copy"),
            (t + "mlp.fc1.weight", g + "mlp.c_fc.weight", "linear"), (t + "mlp.fc1.bias", g + "mlp.c_fc.bias", "copy"),
            (t + "mlp.fc2.weight", g + "mlp.c_proj.weight", "linear"), (t + "mlp.fc2.bias", g + "mlp.c_proj.bias", "copy")]


def name_map(num_layers: int) -> list[tuple[str, str, str]]:
    """Every parameter: (trident name, GPT-2 name, kind of conversion)."""
    names = [("embedding.word.weight", "transformer.wte.weight", "vocab"),
             ("embedding.position.weight", "transformer.wpe.weight", "copy")]
    for i in range(num_layers):
        names += _block_names(i)
    return names + [("final_norm.weight", "transformer.ln_f.weight", "copy"),
                    ("final_norm.bias", "transformer.ln_f.bias", "copy")]


def to_gpt2(tensor: torch.Tensor, kind: str, num_heads: int, vocab_size: int) -> torch.Tensor:
    if kind == "vocab":
        return tensor[:vocab_size]  # padded rows are not tokens
    if kind == "linear":
        return tensor.t()
    if kind == "qkv_weight":
        return qkv_to_gpt2(tensor, num_heads).t()
    if kind == "qkv_bias":
        return qkv_to_gpt2(tensor, num_heads)
    return tensor


def from_gpt2(tensor: torch.Tensor, kind: str, num_heads: int, padded_vocab: int) -> torch.Tensor:
    if kind == "vocab":
        return torch.cat([tensor, tensor.new_zeros(padded_vocab - tensor.shape[0], tensor.shape[1])])
    if kind == "linear":
        return tensor.t()
    if kind == "qkv_weight":
        return qkv_from_gpt2(tensor.t(), num_heads)
    if kind == "qkv_bias":
        return qkv_from_gpt2(tensor, num_heads)
    return tensor


# ---- import ---------------------------------------------------------------------------------------
def read_hf_config(hf_dir: Path) -> dict:
    path = hf_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{hf_dir}: no config.json (not a Hugging Face model folder)")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    return config


def _weight_files(hf_dir: Path) -> list[Path]:
    if (hf_dir / WEIGHTS_FILE).is_file():
        return [hf_dir / WEIGHTS_FILE]
    if (hf_dir / WEIGHTS_INDEX).is_file():
        index = json.loads((hf_dir / WEIGHTS_INDEX).read_text())
        return [hf_dir / name for name in sorted(set(index["weight_map"].values()))]
    pickled = sorted(p.name for p in hf_dir.glob("*.bin")) + sorted(p.name for p in hf_dir.glob("*.pt"))
    if pickled:
        raise ValueError(f"{hf_dir}: only pickled weights ({', '.join(pickled)}); trident never unpickles "
                         f"files (unpickling runs code from the file). Convert them to {WEIGHTS_FILE} where you "
                         f"trust the source, e.g. model.save_pretrained(dir, safe_serialization=True)")
    raise FileNotFoundError(f"{hf_dir}: no {WEIGHTS_FILE} or {WEIGHTS_INDEX}")


def read_hf_tensors(hf_dir: Path, prefix: str = "transformer.") -> dict[str, torch.Tensor]:
    """All tensors of the folder's safetensors file(s), as float32, keyed with the model's prefix
    (`transformer.` for GPT-2, `model.` for Llama)."""
    tensors = {}
    for path in _weight_files(hf_dir):
        if not path.is_file():
            raise FileNotFoundError(f"{hf_dir / WEIGHTS_INDEX} names {path.name}, which is missing")
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                # a bare GPT2Model / LlamaModel saves without the prefix; GPT-2's attention mask buffer is no weight
                name = key if key.startswith((prefix, "lm_head.")) else f"{prefix}{key}"
                if name.endswith((".attn.bias", ".attn.masked_bias")):
                    continue
                tensors[name] = handle.get_tensor(key).float()
    return tensors


def _expected_shape(kind: str, trident_shape: tuple, vocab: int) -> tuple:
    if kind == "vocab":
        return (vocab, trident_shape[1])
    if kind in ("linear", "qkv_weight"):
        return (trident_shape[1], trident_shape[0])
    return tuple(trident_shape)


def import_hf(hf_dir: str | Path, out_dir: str | Path, pad_vocab_multiple: int | None = None,
              seed: int = 1234) -> dict:
    """Write a single-process trident checkpoint (OUT/step_0000000/) from a GPT-2, Llama, Mistral or
    Qwen2 model folder.

    The folder needs config.json and model.safetensors (or a sharded index). The checkpoint keeps the
    complete model config (its trainer state) and the model's own files, byte for byte: tokenizer.json,
    tokenizer_config.json (special tokens, chat template), chat_template.jinja, config.json (as
    hf_config.json). Returns a summary (checkpoint path, sizes, notes)."""
    from trident.checkpoint.reader import complete_checkpoints
    from trident.checkpoint.writer import save_checkpoint
    from trident.parallel.mesh import Mesh
    from trident.parallel.parallelize import parallelize

    require_local(hf_dir, "hf_dir", "safetensors maps local files; `trident import-hf` copies a folder on a store first")
    hf_dir, out = location(hf_dir), location(out_dir)  # the checkpoint may go to a store
    hf = read_hf_config(hf_dir)
    family = model_type(hf, hf_dir / "config.json")
    if complete_checkpoints(out):
        raise FileExistsError(f"{out} already holds checkpoints; import into an empty folder")
    notes = []
    config = trident_config(hf, hf_dir / "config.json", pad_vocab_multiple, seed)
    m = config.model
    if m.seq_length < m.positions:
        notes.append(f"trains on sequences of model.seq_length={m.seq_length} tokens, shorter than the model's "
                     f"{m.positions} positions, to stay inside its attention window of {m.sliding_window}")
    tensors = read_hf_tensors(hf_dir, "transformer." if family == "gpt2" else "model.")
    model = parallelize(config, Mesh(), torch.device("cpu"))  # one process: fresh Adam state, seeded streams
    params = dict(model.named_params)
    with torch.no_grad():
        (_load_gpt2 if family == "gpt2" else _load_llama)(m, params, tensors, hf, hf_dir)
    with tempfile.TemporaryDirectory() as tmp:
        extra = _model_files(hf_dir, Path(tmp), m.vocab_size, notes)
        state = _imported_trainer_state(config, hf_dir, family)
        path = save_checkpoint(out, 0, model.state_pieces(), state, Mesh(), keep_last=0, extra_files=extra)
    return {"hf_dir": str(hf_dir), "checkpoint": str(path), "model_type": family, "vocab_size": m.vocab_size,
            "padded_vocab_size": m.padded_vocab_size(), "parameters": sum(p.numel() for p in params.values()),
            "tokenizer": "tokenizer.json" in extra, "notes": notes}


def _model_files(hf_dir: Path, tmp: Path, vocab: int, notes: list[str]) -> dict[str, Path]:
    """The files that travel with the weights (checkpoint/format.MODEL_FILES): the folder's own, byte for
    byte; a tokenizer.json converted from GPT-2's vocab.json + merges.txt when it has only those."""
    from trident.checkpoint.format import MODEL_FILES

    files = {name: hf_dir / name for name in MODEL_FILES if (hf_dir / name).is_file()}
    files[HF_CONFIG] = hf_dir / "config.json"
    tokenizer = _load_tokenizer(hf_dir, vocab, notes)
    if tokenizer is not None and "tokenizer.json" not in files:
        files["tokenizer.json"] = tokenizer.save(tmp / "tokenizer.json")
    return files


def _load_gpt2(m, params: dict, tensors: dict, hf: dict, hf_dir: Path) -> None:
    names = name_map(m.num_layers)
    unexpected = sorted(set(tensors) - {g for _, g, _ in names} - {"lm_head.weight"})
    if unexpected:
        raise ValueError(f"{hf_dir}: tensors trident's GPT has no place for: {', '.join(unexpected[:5])}")
    _check_tied_head(tensors, hf, hf_dir, "transformer.wte.weight")
    for trident_name, hf_name, kind in names:
        if hf_name not in tensors:
            raise KeyError(f"{hf_dir}: weights have no tensor '{hf_name}'")
        want = _expected_shape(kind, tuple(params[trident_name].shape), m.vocab_size)
        _check_shape(tensors[hf_name], hf_name, want, hf_dir)
        params[trident_name].copy_(from_gpt2(tensors[hf_name], kind, m.num_heads, m.padded_vocab_size()))


def _load_llama(m, params: dict, tensors: dict, hf: dict, hf_dir: Path) -> None:
    entries = llama_tensors(m, m.vocab_size)
    unexpected = sorted(set(tensors) - {g for g, _, _ in entries} - {"lm_head.weight"})
    if unexpected:
        raise ValueError(f"{hf_dir}: tensors trident's Llama has no place for: {', '.join(unexpected[:5])}")
    if m.tie_embeddings:
        _check_tied_head(tensors, hf, hf_dir, "model.embed_tokens.weight")
    for hf_name, trident_name, convert in entries:  # what the export of this model's shapes would write
        if hf_name in tensors:
            want = tuple(convert(torch.empty(params[trident_name].shape, device="meta")).shape)
            _check_shape(tensors[hf_name], hf_name, want, hf_dir)
    for name, value in llama_from_hf(m, tensors, m.padded_vocab_size(), hf_dir).items():
        params[name].copy_(value)


def _check_shape(tensor: torch.Tensor, hf_name: str, want: tuple, hf_dir: Path) -> None:
    if tuple(tensor.shape) != tuple(want):
        raise ValueError(f"{hf_dir}: tensor '{hf_name}' has shape {list(tensor.shape)}, "
                         f"config.json implies {list(want)}")


def _imported_trainer_state(config, hf_dir: Path, family: str) -> dict:
    """The trainer's counters of a run that has not taken a step (the model's pieces add the rest)."""
    from trident.checkpoint.format import build_trainer_state

    return build_trainer_state(step=0, consumed_samples=0, consumed_tokens=0, config=config,
                               imported_from={"hf_dir": str(hf_dir.resolve()), "model_type": family})


def _check_tied_head(tensors: dict, hf: dict, hf_dir: Path, embedding: str) -> None:
    head = tensors.get("lm_head.weight")
    if head is None or torch.equal(head, tensors.get(embedding, head)):
        return
    raise ValueError(f"{hf_dir}: lm_head.weight differs from {embedding} (tie_word_embeddings="
                     f"{hf.get('tie_word_embeddings', True)}); this model ties input and output embeddings")


def _load_tokenizer(hf_dir: Path, vocab: int, notes: list[str]):
    from trident.data.tokenizer import Tokenizer

    if not ((hf_dir / "tokenizer.json").is_file() or (hf_dir / "vocab.json").is_file()):
        notes.append("no tokenizer files in the folder: the checkpoint has no tokenizer.json "
                     "(give one to generate/eval with --tokenizer)")
        return None
    tokenizer = Tokenizer.load(hf_dir)
    if tokenizer.vocab_size > vocab:
        raise ValueError(f"{hf_dir}: tokenizer has {tokenizer.vocab_size} tokens but config.json vocab_size "
                         f"is {vocab}")
    return tokenizer


# ---- optional check with transformers -------------------------------------------------------------
@torch.no_grad()
def verify_export(ckpt_path: str | Path, hf_dir: str | Path, text: str = SAMPLE_TEXT) -> dict:
    """Load the export in transformers and compare its logits with trident's on `text` (needs transformers)."""
    transformers = require_transformers()
    from trident.checkpoint.reader import load_for_inference

    model, tokenizer, config = load_for_inference(str(ckpt_path))
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
    vocab = hf_model.config.vocab_size
    if tokenizer is not None:
        ids = tokenizer.encode(text)[: config.model.seq_length]
    else:
        ids = torch.randint(0, vocab, (config.model.seq_length,), generator=torch.Generator().manual_seed(0)).tolist()
    tokens = torch.tensor([ids])
    ours = model(tokens)[..., :vocab]
    theirs = hf_model(input_ids=tokens).logits
    diff = (ours - theirs).abs().max().item()
    return {"tokens": len(ids), "max_abs_logit_diff": diff, "max_abs_logit": ours.abs().max().item(),
            "transformers_version": transformers.__version__}
