"""`trident rehearse CONFIG [key=value ...] --gpus N --gpu KIND [--ranks R,R,...] [--steps 1] [--json]`."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file or preset name (e.g. mtnlg-530b)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. parallel.pp=15")
    parser.add_argument("--gpus", type=int, required=True, metavar="N", help="ranks in the real layout")
    parser.add_argument("--gpu", default="a100-80gb", metavar="KIND",
                        help="hardware profile whose memory the peak is checked against (as trident plan)")
    parser.add_argument("--ranks", metavar="R,R,...",
                        help="global ranks to rehearse (default: first rank of the first, a middle and the last stage)")
    parser.add_argument("--steps", type=int, default=1, metavar="N", help="training steps per rank (default 1)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def _print_rank(result: dict, capacity: float) -> None:
    from trident.rehearse.run import comparison_rows

    c = result["coordinates"]
    cp = f", cp {c['cp']}" if "cp" in c else ""
    print(f"\nrank {result['rank']} (dp {c['dp']}, pp {c['pp']}{cp}, tp {c['tp']}): {result['parameters']:,} parameters, "
          f"{result['micro_batches']} micro-batches, {result['seconds']:.1f} s, "
          f"{result['rss_peak_bytes'] / 2**30:.2f} GiB resident")
    print(f"  {'MiB':<12} {'measured':>10} {'plan':>10} {'ratio':>7}")
    for name, measured, plan in comparison_rows(result):
        ratio = f"{measured / plan:.3f}" if plan else "-"
        print(f"  {name:<12} {_mib(measured):>10} {_mib(plan):>10} {ratio:>7}")
    fits = "fits" if result["measured"]["peak"] <= capacity else "does NOT fit"
    files = ", ".join(f"{name} {_mib(size)} MiB" for name, size in result["checkpoint_files"].items())
    print(f"  peak {fits} in {_mib(capacity)} MiB usable; a checkpoint writes: {files or 'nothing'}")


def run(args) -> int:
    from trident.config import ConfigError, load_config
    from trident.hardware import load_hardware
    from trident.rehearse.run import rehearse

    try:
        config = load_config(args.config, args.overrides)
        hardware = load_hardware(args.gpu, None)
        if config.model.vocab_size <= 0:
            raise ConfigError("config key 'model.vocab_size' is 0 (filled from the tokenizer at train time); "
                              "rehearsal needs it: add model.vocab_size=50257 (or your tokenizer's size)")
        config.validate(args.gpus)
        ranks = [int(r) for r in args.ranks.split(",")] if args.ranks else None
        if args.steps < 1:
            raise ValueError("--steps must be >= 1")
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    p = config.parallel
    if not args.json:
        cp = f" x cp{p.cp}" if p.cp > 1 else ""
        print(f"rehearsing tp{p.tp} x pp{p.pp}{cp} x dp{args.gpus // (p.tp * p.pp * p.cp)} on {args.gpus} ranks "
              f"(fake process group, fake tensors; one full global batch of {config.train.global_batch_size})")
    show = None if args.json else (lambda result: _print_rank(result, hardware.usable_bytes))
    try:
        result = rehearse(config, args.gpus, ranks, args.steps, on_rank=show)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    return 0
