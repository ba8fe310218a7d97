"""Continue an open model on your own text in one command, as README.md's section shows it.

Nothing can be downloaded here, so transformers makes the "open model": a random Llama-3.2-shaped
model (grouped-query attention, llama3 rope scaling, tied embeddings) with a byte-level BPE tokenizer
trained on the standard library's docstrings, saved as a Hugging Face folder. `trident run` then
continues it on the docstrings (every 20th held out for its evaluation tasks): the start stage
imports it, its own tokenizer tokenizes the text, training continues from its weights, and
report.md shows the base model's scores beside the continued model's.

    python benchmarks/continue_open_model.py --out runs/continue [--steps 100]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch
import transformers
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from trident.data.stdlib_corpus import iter_stdlib_documents


def make_open_model(folder: Path, texts: list[str]) -> None:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    eos = "<|end_of_text|>"
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2048, special_tokens=[eos],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=eos, bos_token=eos)
    eos_id = tokenizer.convert_tokens_to_ids(eos)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=eos_id, eos_token_id=eos_id,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 256})
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/continue")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    root = Path(args.out).resolve()
    root.mkdir(parents=True, exist_ok=True)
    model = root / "Llama-3.2-tiny"
    if not model.exists():
        make_open_model(model, [d["text"] for _, d in zip(range(3000), iter_stdlib_documents())])
    flow = {"sources": [{"name": "stdlib", "generate": {"kind": "stdlib-docstrings", "holdout_every": 20},
                         "curate": {"config": {"stages": [{"stage": "clean"}, {"stage": "exact_dedup"}]}}}],
            "curate": {"progress": False},
            # a random start needs a pretraining learning rate; a published model keeps the preset's 3e-5
            "train": {"from": str(model), "overrides": [f"train.steps={args.steps}", "model.seq_length=256",
                                                        "train.global_batch_size=16", "train.lr=3.0e-3",
                                                        "train.min_lr=3.0e-4", "train.warmup_tokens=40960",
                                                        "logging.log_interval=25"]},
            "eval": {"tasks": ["lambada", "hellaswag"], "heldout": {"source": "stdlib", "n_examples": 64},
                     "batch_size": 16},
            "sample": {"prompt": "def read_file(path):\n    \"\"\"Return the", "max_new_tokens": 30}}
    (root / "flow.yaml").write_text(yaml.safe_dump(flow, sort_keys=False))
    command = [sys.executable, "-m", "trident", "run", str(root / "flow.yaml"), "--out", str(root / "out")]
    print("$", " ".join(command[2:]), flush=True)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
