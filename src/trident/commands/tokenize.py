"""`trident tokenize`: JSONL files -> PREFIX.bin/.idx (Megatron indexed dataset) + PREFIX.stats.json."""
from __future__ import annotations

import argparse
import json
import os
import sys

from trident.text.damage import damage_summary
from trident.text.jsonl import DEFAULT_MAX_DOC_BYTES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", nargs="+", required=True, metavar="FILE",
                        help=".jsonl, .jsonl.gz or .jsonl.zst files (one JSON object a line); local or fsspec URLs (s3://...)")
    parser.add_argument("--output-prefix", required=True, metavar="PREFIX",
                        help="writes PREFIX.bin, PREFIX.idx and PREFIX.stats.json (a local path or an fsspec URL: s3://bucket/x)")
    parser.add_argument("--tokenizer", required=True, metavar="PATH",
                        help="tokenizer.json, or a directory with tokenizer.json or vocab.json + merges.txt, or a "
                             "checkpoint (step_N/, or a folder of them: the newest) to use the model's own tokenizer")
    parser.add_argument("--json-key", default="text", help="JSONL field holding the text (default: text)")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), metavar="N",
                        help="encoding processes (default: min(8, CPUs))")
    parser.add_argument("--strict", action="store_true",
                        help="stop at the first malformed line instead of skipping and counting it")
    parser.add_argument("--max-doc-bytes", type=int, default=DEFAULT_MAX_DOC_BYTES, metavar="N",
                        help="skip (and count as too_large) a line longer than this, read in bounded pieces "
                             f"(default: {DEFAULT_MAX_DOC_BYTES}, as curation)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset at PREFIX")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")


def run(args) -> int:
    from trident.data.run_folder import run_in_folder

    # one run per prefix at a time
    return run_in_folder(args.output_prefix, "tokenize", lambda prefix: _tokenize(args, prefix), prefix=True)


def _tokenizer_path(given: str) -> str:
    """A checkpoint (or a run's folder of them) stands for its own tokenizer: the newest complete one's."""
    from trident.checkpoint.reader import resolve_checkpoint
    from trident.text.storage import location

    path = location(given)
    if not path.is_dir() or any((path / name).is_file() for name in ("tokenizer.json", "vocab.json")):
        return given
    try:
        checkpoint = resolve_checkpoint(given, path)
    except FileNotFoundError:
        return given  # the tokenizer loader names what the folder lacks
    return str(checkpoint) if checkpoint is not None else given


def _tokenize(args, prefix) -> int:
    from trident.data.build import tokenize_files
    from trident.data.tokenize_jsonl import TokenizeError

    outputs = (f"{args.output_prefix}.{ext}" for ext in ("bin", "idx", "stats.json", "doc_lines.npy", "doc_ids.jsonl"))
    existing = [p for p in outputs if (prefix.folder / p.rsplit("/", 1)[-1]).exists()]
    if existing and not args.overwrite:  # an earlier dataset is never silently replaced
        print(f"trident tokenize: error: {existing[0]} already exists; choose another --output-prefix, "
              f"or pass --overwrite", file=sys.stderr)
        return 2
    try:
        stats = tokenize_files(args.input, args.output_prefix, _tokenizer_path(args.tokenizer), json_key=args.json_key,
                               workers=args.workers, strict=args.strict, max_doc_bytes=args.max_doc_bytes,
                               progress=not args.json and sys.stderr.isatty())
    except (OSError, ValueError) as err:
        kind = "bad input" if isinstance(err, TokenizeError) else "error"
        print(f"trident tokenize: {kind}: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats))
        return 0
    dropped = {k: v for k, v in stats["dropped"].items() if v}
    print(f"wrote {stats['output_prefix']}.bin/.idx: {stats['documents']} documents, {stats['tokens']} "
          f"tokens ({stats['dtype']}) from {stats['lines']} lines in {stats['seconds']:.1f}s "
          f"({stats['tokens_per_s'] or 0:,.0f} tokens/s, {stats['workers']} workers)")
    if dropped:
        # the bad lines themselves were logged as FILE:LINE while reading; the stats file lists them
        print("dropped lines: " + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items())))
        if stats["bad_lines_file"]:
            print(f"every bad line: {stats['bad_lines_file']}")
    for line in damage_summary(stats["damaged_files"]):
        print(f"damaged input: {line}")
    print(f"statistics: {stats['output_prefix']}.stats.json")
    return 0
