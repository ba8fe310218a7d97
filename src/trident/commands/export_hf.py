"""`trident export-hf CKPT OUT [--verify] [--json]`: a checkpoint -> a Hugging Face GPT-2 or Llama model folder."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint folder (step_N/, any parallel layout) or a folder of them")
    parser.add_argument("out", help="folder to write config.json, model.safetensors and tokenizer files into")
    parser.add_argument("--max-shard-gb", type=float, default=5.0, metavar="GB",
                        help="largest safetensors shard; bigger models get model-0000i-of-0000n files and an index "
                             "(default 5, as transformers)")
    parser.add_argument("--verify", action="store_true",
                        help="load the export in transformers (must be installed) and compare logits with trident")
    parser.add_argument("--overwrite", action="store_true",
                        help="export into a non-empty OUT (an earlier export's files there are removed first)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from trident.data.run_folder import run_in_folder

    return run_in_folder(args.out, "export-hf", lambda folder: _export(args, folder))  # a second export exits 2


def _export(args, folder) -> int:
    from trident.infer.hf import TransformersMissing, verify_export
    from trident.infer.hf_export import export_hf
    from trident.text.storage import staged_folder

    folder.start_outputs(args.overwrite)
    unverified = None
    try:
        with staged_folder(folder.path) as staged:  # safetensors and transformers want local files: uploaded at the end
            summary = export_hf(args.checkpoint, staged, max_shard_bytes=int(args.max_shard_gb * 10**9)) | {
                "out": args.out}
            if args.verify:
                try:
                    summary["verify"] = verify_export(summary["checkpoint"], staged)
                except TransformersMissing as err:
                    unverified = err  # the export itself is good: it is still written
        folder.record_outputs()
    except (OSError, KeyError, ValueError) as err:
        print(f"trident export-hf: error: {err}", file=sys.stderr)
        return 1
    if unverified is not None:
        print(f"trident export-hf: the export was written to {args.out}, but --verify failed: {unverified}",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"exported {summary['checkpoint']} -> {summary['out']}: {summary['parameters']:,} parameters, "
          f"vocabulary {summary['vocab_size']} (dropped {summary['dropped_padding_rows']} padding rows)")
    if not summary["tokenizer"]:
        print("note: the checkpoint holds no tokenizer.json, so no tokenizer files were written", file=sys.stderr)
    if "verify" in summary:
        v = summary["verify"]
        print(f"verify: transformers {v['transformers_version']} logits vs trident on {v['tokens']} tokens: "
              f"max |diff| {v['max_abs_logit_diff']:.3g} (max |logit| {v['max_abs_logit']:.3g})")
    return 0
