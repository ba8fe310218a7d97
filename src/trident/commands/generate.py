"""`trident generate CKPT --prompt P --max-new-tokens N [--greedy | --temperature T --top-k K --top-p P]`.

With several --prompt, a parallel.* layout or --nproc N > 1, the prompts are generated together on
the KV-cached engine (trident.infer.engine), each rank holding its chunk of the layout."""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint folder (step_N/) or a folder of them (the newest is used)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="parallel.KEY=VALUE",
                        help="generate on this layout (parallel.tp, parallel.pp, parallel.dp, parallel.sequence_parallel)")
    parser.add_argument("--nproc", type=int, default=1, metavar="N", help="local ranks (started with torchrun)")
    parser.add_argument("--prompt", action="append", default=None,
                        help="text to continue; repeat for a batch (default: one empty prompt, a new document)")
    parser.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="tokens to generate (default 64)")
    parser.add_argument("--greedy", action="store_true", help="always take the most likely token")
    parser.add_argument("--temperature", type=float, default=None, metavar="T",
                        help="divide logits by T before sampling (default 1.0; 0 = greedy)")
    parser.add_argument("--top-k", type=int, default=None, metavar="K", help="sample among the K most likely tokens")
    parser.add_argument("--top-p", type=float, default=None, metavar="P",
                        help="sample among the smallest set of tokens with cumulative probability >= P")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (printed with --json when not given)")
    parser.add_argument("--no-stop-at-eod", action="store_true", help="keep going past <|endoftext|>")
    parser.add_argument("--context", choices=("slide", "stop"), default="slide",
                        help="when the model's seq_length is reached: slide the window (default) or stop")
    parser.add_argument("--tokenizer", default=None, metavar="PATH",
                        help="tokenizer to use when the checkpoint holds none (tokenizer.json or a folder)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    parser.add_argument("--threads", type=int, default=0, metavar="N",
                        help="torch CPU threads (default: torch's choice; 1 is often fastest for small models)")
    parser.add_argument("--json", action="store_true", help="print the result and its numbers as JSON")


def run(args) -> int:
    sampling = {"--temperature": args.temperature, "--top-k": args.top_k, "--top-p": args.top_p}
    given = [flag for flag, value in sampling.items() if value is not None]
    if args.greedy and given:
        print(f"trident generate: --greedy cannot be combined with {', '.join(given)}", file=sys.stderr)
        return 2
    prompts = args.prompt or [""]
    if len(prompts) > 1 or args.overrides or args.nproc > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trident.commands.generate_parallel import run_batched

        return run_batched(args, prompts)
    args.prompt = prompts[0]
    import torch

    from trident.checkpoint.reader import load_for_inference
    from trident.data.tokenizer import Tokenizer
    from trident.infer.generate import generate_result
    from trident.text.storage import location

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        if not location(args.checkpoint).is_dir():
            raise FileNotFoundError(f"{args.checkpoint}: no such checkpoint folder")
        model, tokenizer, _ = load_for_inference(args.checkpoint, device=device)
        if args.tokenizer:
            tokenizer = Tokenizer.load(args.tokenizer)
        if tokenizer is None:
            raise ValueError(f"{args.checkpoint}: the checkpoint holds no tokenizer.json; pass --tokenizer PATH")
        result = generate_result(model, tokenizer, args.prompt, args.max_new_tokens, greedy=args.greedy,
                                 temperature=1.0 if args.temperature is None else args.temperature,
                                 top_k=args.top_k or 0, top_p=1.0 if args.top_p is None else args.top_p,
                                 seed=args.seed, stop_at_eod=not args.no_stop_at_eod, context=args.context)
    except (OSError, KeyError, ValueError) as err:
        print(f"trident generate: error: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"prompt": args.prompt, "completion": result.text, "prompt_tokens": len(result.prompt_ids),
                          "new_tokens": len(result.new_ids), "new_ids": result.new_ids,
                          "stop_reason": result.stop_reason, "seed": result.seed, "seconds": result.seconds,
                          "tokens_per_s": result.tokens_per_s, "notes": result.notes}))
        return 0
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(args.prompt + result.text)
    return 0
