"""`trident tokenizer train`: train a byte-level BPE tokenizer on text or JSONL files."""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from trident.text.damage import damage_summary
from trident.text.jsonl import DEFAULT_MAX_DOC_BYTES
from trident.text.storage import location


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser("train", help="train byte-level BPE (GPT-2 style) on your text",
                               description="Train byte-level BPE with <|endoftext|> as the document "
                                           "separator; writes tokenizer.json.")
    train.add_argument("--input", nargs="+", required=True, metavar="FILE",
                       help=".txt (plain text) or .jsonl/.jsonl.gz/.jsonl.zst files")
    train.add_argument("--vocab-size", type=int, required=True, metavar="N",
                       help="vocabulary size including <|endoftext|> (GPT-2: 50257)")
    train.add_argument("--out", required=True, metavar="PATH",
                       help="tokenizer.json path, or a directory to write tokenizer.json into")
    train.add_argument("--json-key", default="text", help="JSONL field holding the text (default: text)")
    train.add_argument("--max-doc-bytes", type=int, default=DEFAULT_MAX_DOC_BYTES, metavar="N",
                       help="skip (and count as too_large) a JSONL line longer than this "
                            f"(default: {DEFAULT_MAX_DOC_BYTES}, as curation)")
    train.add_argument("--gpt2-files", action="store_true",
                       help="also write vocab.json + merges.txt (GPT-2 format) next to tokenizer.json")
    train.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer file at --out")
    train.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    from trident.data.tokenizer import describe, tokenizer_file, train_tokenizer

    skipped: Counter = Counter()
    damaged: dict = {}
    target = tokenizer_file(args.out)
    if target.exists() and not args.overwrite:  # a file trident did not write is never replaced silently
        print(f"trident tokenizer train: error: {target} already exists; choose another --out, or pass --overwrite",
              file=sys.stderr)
        return 2
    try:
        tokenizer = train_tokenizer(args.input, args.vocab_size, args.out, json_key=args.json_key,
                                    show_progress=not args.json and sys.stderr.isatty(),
                                    max_doc_bytes=args.max_doc_bytes, skipped=skipped, damaged=damaged)
    except (OSError, ValueError) as err:
        print(f"trident tokenizer train: {err}", file=sys.stderr)
        return 1
    info = describe(tokenizer)
    info["skipped"] = {k.removeprefix("skipped_lines:"): v for k, v in sorted(skipped.items())}
    info["damaged_files"] = damaged
    if args.gpt2_files:
        vocab, merges = tokenizer.save_gpt2_files(location(tokenizer.source).parent)
        info.update(vocab_json=str(vocab), merges_txt=str(merges))
    if args.json:
        print(json.dumps(info))
    else:
        print(f"wrote {info['path']}: {info['model']} vocabulary of {info['vocab_size']} tokens, "
              f"<|endoftext|> = {info['eod_id']}")
        if skipped:  # bad lines and broken-off files were skipped, not fatal
            print("skipped: " + ", ".join(f"{k} {v}" for k, v in info["skipped"].items()))
        for line in damage_summary(damaged):
            print(f"damaged input: {line}")
    return 0
