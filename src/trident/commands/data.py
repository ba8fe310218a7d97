"""`trident data which RUN --step N | --doc ID [--json]`: a run's data, traced to its documents."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    which = sub.add_parser("which", help="the documents of a step's batch, or the steps that read a document")
    which.add_argument("run", help="the run's output folder (config.yaml, metrics.jsonl), or a flow's (`trident run "
                                   "--out`: its OUT/train)")
    what = which.add_mutually_exclusive_group(required=True)
    what.add_argument("--step", type=int, help="list every sample of this step with its documents and sources")
    what.add_argument("--doc", help="FILE:LINE (a source line) or PREFIX:INDEX (a document of PREFIX.bin)")
    which.add_argument("--json", action="store_true", help="print the answer as JSON")
    remove = sub.add_parser("remove", help="write a copy of a dataset without some documents (a takedown)")
    remove.add_argument("--prefix", required=True, help="the dataset: PREFIX.bin/.idx")
    remove.add_argument("--ids", required=True, help="file of ids, one a line: FILE:LINE, PREFIX:INDEX or INDEX")
    remove.add_argument("--out", required=True, help="the new prefix (OUT.bin/.idx, .doc_lines.npy, .stats.json, "
                                                     ".removal.json)")
    remove.add_argument("--run", help="also list the steps of this run whose batches held a removed document")
    remove.add_argument("--json", action="store_true", help="print the removal report as JSON")


def run(args) -> int:
    if args.action == "remove":
        return _remove(args)
    from trident.config import ConfigError
    from trident.flow.stages import training_run
    from trident.train.which import which_doc, which_step

    try:
        run = training_run(args.run)  # a flow's output folder answers for its OUT/train
        if run != args.run:
            print(f"trident data: {args.run} is a flow's output folder; its training run is {run}", file=sys.stderr)
        answer = which_step(run, args.step) if args.step is not None else which_doc(run, args.doc)
    except (ConfigError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(answer, indent=1) if args.json else _text(answer))
    return 0


def _remove(args) -> int:
    from trident.config import ConfigError
    from trident.data.output_folder import OutputFolderError
    from trident.data.run_folder import RunFolder
    from trident.data.takedown import TakedownError, remove_documents
    from trident.train.which import which_doc

    try:
        with RunFolder(args.out, "data remove", prefix=True):  # one run per prefix at a time
            report = remove_documents(args.prefix, args.ids, args.out)
        if args.run:  # which steps of a run read what was taken down
            report["run_steps"] = {doc: [s["step"] for s in which_doc(args.run, f"{args.prefix}:{doc}")["steps"]]
                                   for doc in report["removed_documents"]}
    except (TakedownError, ConfigError, OutputFolderError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"wrote {args.out}.bin/.idx: {report['documents']} documents, {report['tokens']} tokens; removed "
          f"{report['documents_removed']} documents ({report['tokens_removed']} tokens); {report['not_found']} ids "
          f"matched nothing; report: {args.out}.removal.json")
    return 0


def _text(answer: dict) -> str:
    if "documents" in answer:
        first, count = answer["samples"]
        lines = [f"step {answer['step']}: samples {first}-{first + count - 1}"]
        for d in answer["documents"]:
            named = [d[k] for k in ("id", "url") if d.get(k)] + ([d["source"]] if d["source"] else [])
            source = f" ({'; '.join(named)})" if named else ""
            lines.append(f"  sample {d['sample']}: {d['prefix']} document {d['document']} "
                         f"tokens {d['tokens'][0]}-{d['tokens'][1]}{source}")
        return "\n".join(lines)
    steps = answer["steps"]
    head = f"{answer['document']} ({answer['prefix']} document {answer['index']}): read by {len(steps)} step(s)"
    return "\n".join([head] + [f"  step {s['step']}: samples {', '.join(map(str, s['samples']))}" for s in steps])
