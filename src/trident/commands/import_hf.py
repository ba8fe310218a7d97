"""`trident import-hf DIR OUT [--json]`: a Hugging Face GPT-2 or Llama model folder -> a trident checkpoint."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("hf_dir", help="folder with config.json + model.safetensors (+ tokenizer files)")
    parser.add_argument("out", help="empty folder; the checkpoint is written to OUT/step_0000000/")
    parser.add_argument("--pad-vocab-multiple", type=int, default=None, metavar="N",
                        help="pad the vocabulary to a multiple of N (default: as exported by trident, else 128)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from trident.infer.hf import import_hf
    from trident.text.storage import fetched_folder

    try:
        with fetched_folder(args.hf_dir) as hf_dir:  # a model folder on a store is read from a local copy
            summary = import_hf(hf_dir, args.out, pad_vocab_multiple=args.pad_vocab_multiple) | {"hf_dir": args.hf_dir}
    except FileExistsError as err:  # OUT holds checkpoints: a non-empty output folder exits 2 in every command
        print(f"trident import-hf: error: {err}", file=sys.stderr)
        return 2
    except (OSError, KeyError, ValueError) as err:
        print(f"trident import-hf: error: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary))
        return 0
    for note in summary["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"imported {summary['hf_dir']} -> {summary['checkpoint']}: {summary['parameters']:,} parameters, "
          f"vocabulary {summary['vocab_size']} padded to {summary['padded_vocab_size']}")
    return 0
