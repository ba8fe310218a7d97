"""Serving throughput and latency: `trident serve` (continuous batching, KV cache) at 1, 8 and 64
concurrent clients, beside transformers' `generate` on the Hugging Face export of the same checkpoint
(one request at a time, and batched), same CPU, same thread count.

Model: the demo size (4 layers, hidden 192, 6 heads, seq_length 512) with seeded random weights
(speed does not depend on training) and a 2048-token BPE tokenizer trained on Python's own sources.
Every request: a 32-token prompt, 64 new tokens, greedy, `ignore_eos` (so every request makes all
64 tokens, as transformers does with min_new_tokens). trident: the server in a subprocess with
--threads T, clients on aiohttp in this process; latency is a request's end-to-end time. transformers:
GPT2LMHeadModel from `trident export-hf`'s folder, torch.set_num_threads(T), sequential (one
request at a time) and batched (--hf-batch prompts a call, left-padded). tokens/s = generated tokens
over wall time, after one warm-up request each. The first prompt's greedy text is checked equal
between the two.

    python benchmarks/serve.py [--quick] [--threads 1] [--requests-per-client 2]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from common import emit_json, load_average, print_table
from trident.config import Config, load_config
from trident.train.launch import free_port

MODEL = ["model.num_layers=4", "model.hidden_size=192", "model.num_heads=6", "model.seq_length=512",
         "model.hidden_dropout=0.0", "model.attention_dropout=0.0"]
PROMPT_TOKENS, NEW_TOKENS = 32, 64


def build_checkpoint(root: Path) -> tuple[Path, object]:
    from trident.checkpoint.writer import save_checkpoint
    from trident.data.tokenizer import train_tokenizer
    from trident.model.gpt import build_model
    from trident.parallel.mesh import Mesh
    from trident.parallel.state import weight_pieces

    corpus = root / "corpus.txt"
    sources = sorted(Path(statistics.__file__).parent.glob("*.py"))[:60]
    corpus.write_text("\n".join(p.read_text(errors="ignore") for p in sources))
    tokenizer = train_tokenizer([corpus], 2048, root / "tokenizer.json")
    config: Config = load_config("demo", MODEL + [f"model.vocab_size={tokenizer.vocab_size}"])
    model = build_model(config.model, config.model.padded_vocab_size(), seed=1234)
    path = save_checkpoint(root / "checkpoints", 1, weight_pieces(list(model.named_parameters())),
                           {"config": config.to_dict(), "step": 1}, Mesh(),
                           extra_files={"tokenizer.json": root / "tokenizer.json"})
    return path, tokenizer


def prompts(tokenizer, count: int) -> list[list[int]]:
    ids = tokenizer.encode(Path(statistics.__file__).read_text())
    return [ids[i * PROMPT_TOKENS: (i + 1) * PROMPT_TOKENS] for i in range(count)]


# ---- trident serve ------------------------------------------------------------------------------
def start_server(checkpoint: Path, threads: int, max_batch: int):
    import subprocess
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "trident", "serve", str(checkpoint), "--port", str(port),
                             "--threads", str(threads), "--max-batch", str(max_batch)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("trident serve did not start")


async def _client(session, url: str, jobs: list[list[int]], latencies: list, texts: list) -> None:
    for ids in jobs:
        body = {"prompt": ids, "max_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}
        start = time.perf_counter()
        async with session.post(url + "/v1/completions", json=body) as response:
            answer = await response.json()
        latencies.append(time.perf_counter() - start)
        assert answer["usage"]["completion_tokens"] == NEW_TOKENS, answer
        texts.append((ids, answer["choices"][0]["text"]))


async def _load(url: str, clients: int, per_client: int, pool: list[list[int]]) -> dict:
    import aiohttp

    latencies, texts = [], []
    plan = [[pool[(c * per_client + i) % len(pool)] for i in range(per_client)] for c in range(clients)]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
        start = time.perf_counter()
        await asyncio.gather(*(_client(session, url, jobs, latencies, texts) for jobs in plan))
        wall = time.perf_counter() - start
    return {"clients": clients, "requests": len(latencies), "tokens_per_s": len(latencies) * NEW_TOKENS / wall,
            "p50_s": statistics.median(latencies), "p99_s": _percentile(latencies, 0.99), "texts": texts}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# ---- transformers --------------------------------------------------------------------------------
def hf_generate(folder: Path, pool: list[list[int]], batch: int, requests: int, eod: int) -> dict:
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(folder).eval()
    with torch.inference_mode():  # warm-up, as for the server
        model.generate(torch.tensor(pool[:1]), max_new_tokens=4, do_sample=False, pad_token_id=eod)
    latencies, outputs, start = [], [], time.perf_counter()
    for first in range(0, requests, batch):
        chunk = [pool[i % len(pool)] for i in range(first, min(requests, first + batch))]
        ids = torch.tensor(chunk)  # every prompt has PROMPT_TOKENS tokens: no padding needed
        begin = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                 min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=eod)
        latencies += [time.perf_counter() - begin] * len(chunk)
        outputs += out[:, ids.shape[1]:].tolist()
    wall = time.perf_counter() - start
    return {"batch": batch, "requests": requests, "tokens_per_s": requests * NEW_TOKENS / wall,
            "p50_s": statistics.median(latencies), "p99_s": _percentile(latencies, 0.99), "outputs": outputs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--hf-batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from trident.infer.hf_export import export_hf

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint, tokenizer = build_checkpoint(root)
        export_hf(checkpoint, root / "hf")
        pool = prompts(tokenizer, 64)
        levels = [1, 8] if args.quick else [1, 8, 64]
        proc, url = start_server(checkpoint, args.threads, max_batch=64)
        try:
            asyncio.run(_load(url, 1, 1, pool))  # warm-up: first-call allocations are not serving speed
            served = [asyncio.run(_load(url, c, args.requests_per_client if c > 1 else 8, pool)) for c in levels]
        finally:
            proc.terminate()
            proc.wait(60)
        sequential = hf_generate(root / "hf", pool, 1, 8, tokenizer.eod_id)
        batched = hf_generate(root / "hf", pool, args.hf_batch, 2 * args.hf_batch if not args.quick else 16,
                              tokenizer.eod_id)
    same = served[0]["texts"][0][1] == tokenizer.decode(sequential["outputs"][0])
    rows = [[f"trident serve, {r['clients']} client(s)", r["requests"], r["tokens_per_s"], r["p50_s"], r["p99_s"]]
            for r in served]
    rows += [["transformers generate, one at a time", sequential["requests"], sequential["tokens_per_s"],
              sequential["p50_s"], sequential["p99_s"]],
             [f"transformers generate, batch {batched['batch']}", batched["requests"], batched["tokens_per_s"],
              batched["p50_s"], batched["p99_s"]]]
    print_table(f"serving, {PROMPT_TOKENS}-token prompts, {NEW_TOKENS} new tokens, {args.threads} thread(s); "
                f"load {load_average()['load_1m']}", ["method", "requests", "tokens/s", "p50 s", "p99 s"], rows)
    top = served[-1]["tokens_per_s"] / sequential["tokens_per_s"]
    one = served[0]["tokens_per_s"] / sequential["tokens_per_s"]
    print(f"trident at {served[-1]['clients']} clients / sequential transformers: {top:.2f}x (target >= 3); "
          f"trident at 1 client / transformers at 1: {one:.2f}x (target >= 1); greedy text identical: {same}")
    emit_json("serve", {"threads": args.threads, "identical_greedy_text": same, "ratio_top_vs_hf_sequential": top,
                        "ratio_one_vs_hf_sequential": one,
                        "trident": [{k: v for k, v in r.items() if k != "texts"} for r in served],
                        "transformers": [{k: v for k, v in r.items() if k != "outputs"} for r in (sequential, batched)]})


if __name__ == "__main__":
    main()
