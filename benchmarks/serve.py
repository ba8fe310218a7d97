"""Serving throughput and latency: `trident serve` (continuous batching, KV cache) at 1, 8 and 64
concurrent clients on /v1/completions, and 64 clients on /v1/chat/completions, beside transformers'
`generate` on the Hugging Face export of the same checkpoint (one request at a time, and batched),
same CPU, same thread count.

Model: the demo size (4 layers, hidden 192, 6 heads, seq_length 512) with seeded random weights
(speed does not depend on training) and a 2048-token BPE tokenizer trained on Python's own sources.
Every request: a 32-token prompt, 64 new tokens, greedy, `ignore_eos` (so every request makes all
64 tokens, as transformers does with min_new_tokens). trident: the server in a subprocess with
--threads T, clients on aiohttp in this process; latency is a request's end-to-end time. transformers:
GPT2LMHeadModel from `trident export-hf`'s folder, torch.set_num_threads(T), sequential (one
request at a time) and batched (--hf-batch prompts a call, left-padded). tokens/s = generated tokens
over wall time, after one warm-up request each. The first prompt's greedy text is checked equal
between the two.

Chat: the checkpoint carries a tokenizer_config.json with a ChatML-style template; each request is a
system and a user message (the user text: a 32-token prompt decoded); the server renders them, and
transformers' side renders the same messages with its own `apply_chat_template` (the prompt token
counts are checked equal) and generates sequentially. "Not slower per token": chat tokens/s at 64
clients over /v1/completions tokens/s at 64 clients given the very token ids the template renders
(same prompts, same work: what differs is the chat path), run alternately twice each on one server,
the sums compared.

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

CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
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
    import json

    (root / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>",
                                                            "chat_template": CHAT_TEMPLATE}))
    path = save_checkpoint(root / "checkpoints", 1, weight_pieces(list(model.named_parameters())),
                           {"config": config.to_dict(), "step": 1}, Mesh(),
                           extra_files={"tokenizer.json": root / "tokenizer.json",
                                        "tokenizer_config.json": root / "tokenizer_config.json"})
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


def chat_messages(tokenizer, ids: list[int]) -> list[dict]:
    return [{"role": "system", "content": "Continue the code."}, {"role": "user", "content": tokenizer.decode(ids)}]


async def _client(session, url: str, jobs: list, latencies: list, texts: list) -> None:
    for prompt in jobs:  # token ids (completions) or messages (chat)
        chat = isinstance(prompt[0], dict)
        body = {"messages" if chat else "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0,
                "ignore_eos": True}
        start = time.perf_counter()
        async with session.post(url + ("/v1/chat/completions" if chat else "/v1/completions"), json=body) as response:
            answer = await response.json()
        latencies.append(time.perf_counter() - start)
        assert answer["usage"]["completion_tokens"] == NEW_TOKENS, answer
        choice = answer["choices"][0]
        texts.append((prompt, choice["message"]["content"] if chat else choice["text"], answer["usage"]))


async def _load(url: str, clients: int, per_client: int, pool: list) -> dict:
    import aiohttp

    latencies, texts = [], []
    plan = [[pool[(c * per_client + i) % len(pool)] for i in range(per_client)] for c in range(clients)]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
        start = time.perf_counter()
        await asyncio.gather(*(_client(session, url, jobs, latencies, texts) for jobs in plan))
        wall = time.perf_counter() - start
    return {"clients": clients, "requests": len(latencies), "tokens_per_s": len(latencies) * NEW_TOKENS / wall,
            "p50_s": statistics.median(latencies), "p99_s": _percentile(latencies, 0.99), "texts": texts,
            "latencies": latencies}


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


def hf_chat_prompts(root: Path, tokenizer, pool: list[list[int]]) -> list[list[int]]:
    """The chat requests' prompts as transformers renders them (apply_chat_template on the same files)."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(root / "tokenizer.json"), eos_token="<|endoftext|>",
                                 chat_template=CHAT_TEMPLATE)
    texts = [hf.apply_chat_template(chat_messages(tokenizer, ids), add_generation_prompt=True, tokenize=False)
             for ids in pool]
    return [hf.encode(text, add_special_tokens=False) for text in texts]


def serve_all(checkpoint: Path, args, pool: list[list[int]], chats: list[list[dict]],
              chat_pool: list[list[int]]) -> tuple[list[dict], list[dict], list[dict]]:
    """Completions at 1, 8 (and 64) clients; then at the top level chat and completions of the same
    rendered ids, alternately, twice each; on one server."""
    levels = [1, 8] if args.quick else [1, 8, 64]
    proc, url = start_server(checkpoint, args.threads, max_batch=64)
    try:
        asyncio.run(_load(url, 1, 1, pool))  # warm-up: first-call allocations are not serving speed
        asyncio.run(_load(url, 1, 1, chats))
        served = [asyncio.run(_load(url, c, args.requests_per_client if c > 1 else 8, pool)) for c in levels]
        chat, same_ids = [], []
        for _ in range(2):
            chat.append(asyncio.run(_load(url, levels[-1], args.requests_per_client, chats)))
            same_ids.append(asyncio.run(_load(url, levels[-1], args.requests_per_client, chat_pool)))
    finally:
        proc.terminate()
        proc.wait(60)
    return served, chat, same_ids


def _total(results: list[dict]) -> dict:
    """Runs of one kind as one: tokens/s over their summed wall time, latencies of all."""
    walls = [r["requests"] * NEW_TOKENS / r["tokens_per_s"] for r in results]
    latencies = [lat for r in results for lat in r["latencies"]]
    return {"clients": results[0]["clients"], "requests": sum(r["requests"] for r in results),
            "tokens_per_s": sum(r["requests"] for r in results) * NEW_TOKENS / sum(walls),
            "p50_s": statistics.median(latencies), "p99_s": _percentile(latencies, 0.99),
            "texts": [t for r in results for t in r["texts"]]}


def _row(label: str, result: dict) -> list:
    return [label, result["requests"], result["tokens_per_s"], result["p50_s"], result["p99_s"]]


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
        chats = [chat_messages(tokenizer, ids) for ids in pool]
        chat_pool = hf_chat_prompts(root, tokenizer, pool)
        served, chat_runs, same_id_runs = serve_all(checkpoint, args, pool, chats, chat_pool)
        chat, same_ids = _total(chat_runs), _total(same_id_runs)
        sequential = hf_generate(root / "hf", pool, 1, 8, tokenizer.eod_id)
        chat_sequential = hf_generate(root / "hf", chat_pool, 1, 8, tokenizer.eod_id)
        batched = hf_generate(root / "hf", pool, args.hf_batch, 2 * args.hf_batch if not args.quick else 16,
                              tokenizer.eod_id)
    same = served[0]["texts"][0][1] == tokenizer.decode(sequential["outputs"][0])
    rendered = all(len(chat_pool[chats.index(messages)]) == usage["prompt_tokens"]
                   for messages, _, usage in chat["texts"])
    rows = [_row(f"trident serve, {r['clients']} client(s)", r) for r in served]
    rows += [_row(f"trident serve chat, {chat['clients']} clients (2 runs)", chat),
             _row(f"trident serve, {chat['clients']} clients, the chat prompts' ids (2 runs)", same_ids),
             _row("transformers generate, one at a time", sequential),
             _row("transformers generate (chat prompts), one at a time", chat_sequential),
             _row(f"transformers generate, batch {batched['batch']}", batched)]
    print_table(f"serving, {PROMPT_TOKENS}-token prompts, {NEW_TOKENS} new tokens, {args.threads} thread(s); "
                f"load {load_average()['load_1m']}", ["method", "requests", "tokens/s", "p50 s", "p99 s"], rows)
    top = served[-1]["tokens_per_s"] / sequential["tokens_per_s"]
    one = served[0]["tokens_per_s"] / sequential["tokens_per_s"]
    chat_ratio = chat["tokens_per_s"] / chat_sequential["tokens_per_s"]
    per_token = chat["tokens_per_s"] / same_ids["tokens_per_s"]
    print(f"trident at {served[-1]['clients']} clients / sequential transformers: {top:.2f}x (target >= 3); "
          f"trident at 1 client / transformers at 1: {one:.2f}x (target >= 1); greedy text identical: {same}")
    print(f"chat at {chat['clients']} clients / sequential transformers on the same rendered prompts: "
          f"{chat_ratio:.2f}x; chat / completions of the same ids, tokens/s at {chat['clients']} clients: "
          f"{per_token:.2f} "
          f"(target: not slower, >= 1 within noise); prompts rendered alike: {rendered}")
    emit_json("serve", {"threads": args.threads, "identical_greedy_text": same, "ratio_top_vs_hf_sequential": top,
                        "ratio_one_vs_hf_sequential": one, "ratio_chat_vs_hf_sequential": chat_ratio,
                        "chat_over_completions_per_token": per_token, "chat_prompts_rendered_alike": rendered,
                        "trident": [{k: v for k, v in r.items() if k not in ("texts", "latencies")}
                                    for r in served + [chat, same_ids]],
                        "transformers": [{k: v for k, v in r.items() if k != "outputs"}
                                         for r in (sequential, chat_sequential, batched)]})


if __name__ == "__main__":
    main()
