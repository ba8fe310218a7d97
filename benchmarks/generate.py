"""Generation speed: trident.infer.generate with its KV cache against recomputing the whole prefix
for every new token, greedy, same model, same run.

Model: the demo size (4 layers, hidden 192, 6 heads, vocabulary 2048 like the demo's tokenizer)
with seq_length 512, seeded random weights (speed does not depend on training). For each prompt
length, 256 new tokens (prompt + new tokens fit in the 512 window, so nothing slides):
- kv-cache: `trident.infer.generate.generate_tokens(greedy=True)`: one pass over the prompt, then
  one token at a time against the cache;
- no cache, model(ids): calls the model on the whole growing sequence every token (all positions'
  logits, as a loop without a cache written against the model's API would);
- no cache, last head: the same recomputation of every block over the prefix, but only the last
  position goes through the output layer (the cheapest way to generate without a cache).
The generated ids of the three must be identical (greedy). Methods alternate (forward, then
reversed order, each round); tokens/s from the median CPU time of this process (one thread by
default; wall time printed too). The ratio is kv-cache tokens/s over the no-cache ones.

    python benchmarks/generate.py [--quick] [--new-tokens 256] [--prompts 32,256] [--rounds 3] [--threads 1]
"""
from __future__ import annotations

import argparse

import torch

from common import Timer, emit_json, load_average, median, print_table
from trident.config import load_config
from trident.infer.generate import generate_tokens
from trident.model.gpt import build_model, count_parameters
from trident.parallel import tensor as T

MODEL = ["model.num_layers=4", "model.hidden_size=192", "model.num_heads=6", "model.seq_length=512",
         "model.hidden_dropout=0.0", "model.attention_dropout=0.0"]


def build(vocab: int):
    config = load_config("demo", MODEL + [f"model.vocab_size={vocab}"])
    return build_model(config.model, config.model.padded_vocab_size(), seed=1234).eval()


def last_position_logits(model, tokens: torch.Tensor) -> torch.Tensor:
    """Every block over the whole sequence, the output layer on the last position only."""
    x = model.embedding(tokens, 0)  # [s, b, h]
    for block in model.blocks.values():
        x = block(x)
    x = model.final_norm(x[-1:])
    return T.parallel_lm_logits(x, model.embedding.word.weight, model.tp)[0, 0]


@torch.inference_mode()
def without_cache(model, prompt: list[int], new_tokens: int, vocab: int, last_only: bool) -> list[int]:
    """Greedy decoding that runs the model over the whole prefix for every token."""
    ids = list(prompt)
    for _ in range(new_tokens):
        tokens = torch.tensor([ids], dtype=torch.long)
        logits = last_position_logits(model, tokens) if last_only else model(tokens)[0, -1]
        ids.append(int(logits.float()[:vocab].argmax()))
    return ids[len(prompt):]


def with_cache(model, prompt: list[int], new_tokens: int, vocab: int) -> list[int]:
    return generate_tokens(model, prompt, new_tokens, vocab, greedy=True, stop_at_eod=False,
                           context="stop").new_ids


def measure(model, prompt: list[int], new_tokens: int, vocab: int, rounds: int) -> dict:
    methods = {"kv-cache": lambda: with_cache(model, prompt, new_tokens, vocab),
               "no cache, model(ids)": lambda: without_cache(model, prompt, new_tokens, vocab, False),
               "no cache, last head": lambda: without_cache(model, prompt, new_tokens, vocab, True)}
    names, cpu, wall, outputs = list(methods), {n: [] for n in methods}, {n: [] for n in methods}, {}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            with Timer() as timer:
                outputs[name] = methods[name]()
            cpu[name].append(timer.cpu)
            wall[name].append(timer.wall)
    reference = outputs["kv-cache"]
    first_difference = {name: next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), None)
                        for name, ids in outputs.items()}
    return {"prompt_tokens": len(prompt), "new_tokens": new_tokens,
            "identical": all(ids == reference for ids in outputs.values()) and len(reference) == new_tokens,
            "first_difference": first_difference, "cpu_s": cpu, "wall_s": wall,
            "tokens_per_s": {n: new_tokens / median(cpu[n]) for n in names},
            "speedup": {n: median(cpu[n]) / median(cpu["kv-cache"]) for n in names if n != "kv-cache"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one prompt length (32), 2 rounds")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompts", default=None, help="prompt lengths in tokens (default 32,256; quick 32)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3; quick 2)")
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one core)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prompts = [int(p) for p in (args.prompts or ("32" if args.quick else "32,256")).split(",")]
    rounds = args.rounds or (2 if args.quick else 3)
    model = build(args.vocab)
    if max(prompts) + args.new_tokens > model.cfg.seq_length:
        parser.error(f"prompt + new tokens must fit model.seq_length={model.cfg.seq_length}")
    load_start = load_average()
    print(f"model: 4 layers, hidden 192, seq_length {model.cfg.seq_length}, vocabulary {args.vocab}, "
          f"{count_parameters(model):,} parameters; {args.threads} thread(s); load {load_start}")
    generator = torch.Generator().manual_seed(0)
    results, rows = [], []
    for length in prompts:
        prompt = torch.randint(0, args.vocab, (length,), generator=generator).tolist()
        result = measure(model, prompt, args.new_tokens, args.vocab, rounds)
        results.append(result)
        for name, rate in result["tokens_per_s"].items():
            rows.append([length, name, rate, median(result["wall_s"][name]), median(result["cpu_s"][name]),
                         result["speedup"].get(name, 1.0), result["identical"]])
    print_table(f"{args.new_tokens} new tokens, greedy; median of {rounds} alternating rounds",
                ["prompt", "method", "tokens/s (cpu)", "wall s", "cpu s", "kv-cache speed-up", "same tokens"], rows)
    for result in results:
        print(f"prompt {result['prompt_tokens']}: kv-cache is {result['speedup']['no cache, last head']:.1f}x the "
              f"cheapest no-cache loop, {result['speedup']['no cache, model(ids)']:.1f}x model(ids); "
              f"identical tokens: {result['identical']}")
    emit_json("generate", {"threads": args.threads, "vocab": args.vocab, "rounds": rounds, "results": results,
                           "machine_at_start": load_start})


if __name__ == "__main__":
    main()
