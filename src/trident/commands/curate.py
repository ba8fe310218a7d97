"""`trident curate CONFIG [--input PATH...] [--out DIR] [key=value ...]` runs a curation pipeline;
`trident curate why OUT URL|ID` says where a document of that run went and why;
`trident curate train-quality --positive FILE... --negative FILE... --out MODEL` trains the
quality classifier it can use; `trident curate blend --sources FILE [--out data.yaml]` turns
per-source token counts and weights/epochs into a training config's data section."""
from __future__ import annotations

import argparse
import json
import os
import sys

TRAIN_QUALITY = "train-quality"
BLEND = "blend"
WHY = "why"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="CONFIG|why|train-quality|blend",
                        help="pipeline YAML (or preset name, e.g. curate-cc), 'why OUT URL|ID', 'train-quality' "
                             "or 'blend'")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. workers=4 stages.min_length.min_tokens=64")
    parser.add_argument("--input", action="extend", nargs="+", default=[], metavar="PATH",
                        help="input files, folders or glob patterns (.warc[.gz], .html, .jsonl[.gz|.zst]; "
                             "a folder's other files are skipped and counted)")
    parser.add_argument("--out", default=None, help="output folder (curate, default curated/) or model file (train-quality)")
    parser.add_argument("--executor", choices=["local", "ray"], default=None, help="override the config's executor")
    parser.add_argument("--workers", type=int, default=None, help="processes / Ray CPUs (0: one per core)")
    parser.add_argument("--overwrite", action="store_true",
                        help="curate into a non-empty --out that is not this pipeline's interrupted run (an earlier "
                             "curate run's outputs there are removed; other files are kept)")
    parser.add_argument("--json", action="store_true", help="print the stats (or training metrics) as JSON")
    quality = parser.add_argument_group("train-quality")
    quality.add_argument("--positive", action="extend", nargs="+", default=[], metavar="PATH",
                         help="curated, high-quality text (e.g. OpenWebText2 JSONL)")
    quality.add_argument("--negative", action="extend", nargs="+", default=[], metavar="PATH",
                         help="raw web text (e.g. Common Crawl WARC)")
    quality.add_argument("--max-docs", type=int, default=None, help="at most this many documents per class")
    quality.add_argument("--n-features", type=int, default=1 << 18, help="hashed feature columns (default 2^18)")
    quality.add_argument("--ngram-max", type=int, default=2, help="word n-grams 1..N (default 2)")
    quality.add_argument("--C", type=float, default=1.0, help="inverse L2 regularisation strength")
    quality.add_argument("--seed", type=int, default=0)
    blend = parser.add_argument_group("blend")
    blend.add_argument("--sources", default=None, help="sources YAML, or a preset name (blend-mtnlg)")
    blend.add_argument("--train-tokens", type=float, default=None, help="override the file's train_tokens")


def run(args: argparse.Namespace) -> int:
    """0 on success; 2 on a config mistake (as `trident train`); 1 on any other curation error."""
    # curation's numpy work is not BLAS; OpenBLAS's thread pool spins ~0.1 CPU s per process at import,
    # on a core another worker needs (set before numpy is first imported; a user's own setting wins)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from trident.config import ConfigError
    from trident.curate.document import CurateError
    from trident.data.output_folder import OutputFolderError

    try:
        if args.target == TRAIN_QUALITY:
            return _train_quality(args)
        if args.target == BLEND:
            return _blend(args)
        if args.target == WHY:
            return _why(args)
        return _curate(args)
    except ConfigError as err:
        print(f"trident curate: error: {err}", file=sys.stderr)
        return 2
    except CurateError as err:
        print(f"trident curate: error: {err}", file=sys.stderr)
        return 1
    except OutputFolderError as err:
        print(f"trident curate: error: {err}", file=sys.stderr)
        return 2


def _curate(args: argparse.Namespace) -> int:
    from trident.curate.run.pipeline import run_pipeline
    from trident.data.run_folder import RunFolder
    from trident.text.damage import damage_summary

    stats = run_pipeline(args.target, list(args.input), RunFolder(args.out or "curated", "curate"),
                         executor=args.executor, workers=args.workers, overrides=args.overrides,
                         overwrite=args.overwrite)
    if args.json:
        print(json.dumps(stats, indent=1))
        return 0
    from trident.text.box_table import box_table

    rows = []
    for stage in stats["stages"]:
        c = stage["counters"]
        drops = ", ".join(f"{k[8:]} {v}" for k, v in c.items() if k.startswith("dropped:"))
        rows.append([stage["name"], str(c.get("in", 0)), str(c.get("out", 0)), drops])
    print(box_table(f"curation -> {args.out or 'curated'}", ["stage", "in", "out", "dropped by reason"], rows,
                    right=("in", "out"), encoding=sys.stdout.encoding))
    print(f"{stats['output']['documents']} documents in {len(stats['output']['shards'])} shard(s); "
          f"{len(stats['errors'])} bad input record(s) reported; accounting "
          f"{'OK' if stats['accounting']['ok'] else 'FAILED'}; {stats['elapsed_s']} s")
    if stats.get("skipped_files"):
        from trident.curate.read.inputs import skipped_summary

        print(f"skipped: {skipped_summary(stats['skipped_files'])} (files trident does not read)")
    for line in damage_summary(stats["stages"][0]["counters"]):
        print(f"damaged input: {line}")
    out = (args.out or "curated").rstrip("/")
    print(f"{stats['drops']['records']} dropped document(s) logged in {out}/drops "
          f"(`trident curate why {out} URL|ID` says where one went)")
    return 0


def _why(args: argparse.Namespace) -> int:
    """`trident curate why OUT URL|ID`: 0 when the document was found, 1 when it was not."""
    from trident.curate.document import CurateError
    from trident.curate.run.why import why

    if len(args.overrides) != 2:
        raise CurateError("usage: trident curate why OUT URL|ID")
    try:
        lines, result = why(*args.overrides)
    except FileNotFoundError as err:
        raise CurateError(str(err)) from None
    print(json.dumps(result, indent=1) if args.json else "\n".join(lines))
    return 0 if result["dropped"] or result["kept"] else 1


def _train_quality(args: argparse.Namespace) -> int:
    from trident.curate.document import CurateError
    from trident.curate.filters.quality import texts_from_files, train_quality_model

    if not args.positive or not args.negative or not args.out:
        raise CurateError("train-quality needs --positive PATH..., --negative PATH... and --out MODEL.safetensors")
    positive = texts_from_files(args.positive, args.max_docs)
    negative = texts_from_files(args.negative, args.max_docs)
    model = train_quality_model(positive, negative, n_features=args.n_features,
                                ngram_range=(1, args.ngram_max), C=args.C, seed=args.seed)
    model.save(args.out)
    summary = {"model": str(args.out), **model.info}
    print(json.dumps(summary, indent=1) if args.json else
          "\n".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


def _blend(args: argparse.Namespace) -> int:
    import yaml

    from trident.config import resolve_path
    from trident.curate.document import CurateError
    from trident.data.blend_plan import BlendPlanError, data_section, load_sources, plan_blend
    from trident.text.storage import location

    if not args.sources:
        raise CurateError("blend needs --sources FILE (or a preset such as blend-mtnlg)")
    try:
        sources, train_tokens = load_sources(resolve_path(args.sources))
        rows = plan_blend(sources, args.train_tokens or train_tokens)
    except BlendPlanError as err:
        raise CurateError(str(err)) from None  # exit 1, as every curation error
    section = data_section(rows)
    if args.out:
        location(args.out).write_text(yaml.safe_dump(section, sort_keys=False))
    if args.json:
        print(json.dumps({"train_tokens": args.train_tokens or train_tokens, "sources": rows, **section}, indent=1))
        return 0
    for row in rows:
        print(f"{row['name']:<22} {row['tokens'] / 1e9:8.2f}B tokens  weight {row['weight']:.4f}  "
              f"epochs {row['epochs']:.2f}")
    print(yaml.safe_dump(section, sort_keys=False), end="")
    return 0
