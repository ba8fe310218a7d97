"""`trident plan CONFIG [key=value ...] --gpus N [--gpu NAME] [--rank [--top K]] [--json]`."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file or preset name (e.g. mtnlg-530b)")
    parser.add_argument("overrides", nargs="*",
                        help="dotted key=value overrides (right after CONFIG), e.g. parallel.tp=4")
    parser.add_argument("--gpus", type=int, required=True, metavar="N", help="devices in the cluster")
    parser.add_argument("--gpu", default="a100-80gb", metavar="NAME",
                        help="hardware profile: a100-80gb | a100-40gb | h100-80gb | h200 | cpu, or one from --hardware")
    parser.add_argument("--gpus-per-node", type=int, metavar="N",
                        help="devices per node (default: the profile's, 8 on DGX)")
    parser.add_argument("--hardware", metavar="FILE", help="YAML file of extra or replacement hardware profiles")
    parser.add_argument("--rank", action="store_true", help="rank every valid layout by predicted step time")
    parser.add_argument("--top", type=int, default=10, metavar="K", help="rows of the ranking to show (default 10)")
    parser.add_argument("--by-mesh", action="store_true", help="rank (tp, pp, dp) meshes, each by its best layout")
    parser.add_argument("--paper", action="store_true",
                        help="plan as MT-NLG ran (Megatron 2021): gradients in the training precision (16 bytes/param "
                             "in bf16) and math attention keeping s x s scores; default: as trident's trainer runs "
                             "(an fp32 gradient buffer, 18 bytes/param, SDPA attention, the tensors its autograd "
                             "graph keeps under the device's autocast; docs/planner.md)")
    # the trainer's assumptions, now the default; kept so that earlier command lines still work
    parser.add_argument("--flash-attention", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fp32-grads", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    from trident.config import ConfigError, load_config, validate_model
    from trident.plan.memory import Layout
    from trident.plan.report import batch_remark, plan_json, print_plan, print_ranking, ranking_json
    from trident.plan.search import evaluate, rank_layouts
    from trident.hardware import load_hardware
    from trident.text.storage import require_local

    try:
        require_local(args.hardware, "--hardware", "hardware profiles are read from a local YAML file")
        config = load_config(args.config, args.overrides)
        validate_model(config)
        hardware = load_hardware(args.gpu, args.hardware)
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if config.model.vocab_size <= 0:
        print("error: config key 'model.vocab_size' is 0 (filled from the tokenizer at train time); "
              "the planner needs it: add model.vocab_size=50257 (or your tokenizer's size)", file=sys.stderr)
        return 2
    if args.gpus < 1 or args.top < 1:
        print("error: --gpus and --top must be >= 1", file=sys.stderr)
        return 2
    per_node = args.gpus_per_node or hardware.gpus_per_node
    # what the trainer does (parallel/data.py's fp32 buffer, SDPA), unless the paper's setting is asked for
    grad_dtype, flash = ("param", False) if args.paper else ("fp32", True)
    layout = Layout.from_config(config, args.gpus, grad_dtype)
    plan = evaluate(config, layout, hardware, args.gpus, per_node, flash)
    if not args.json and (remark := batch_remark(config)) is not None:
        print(remark)
    if args.rank:
        ranking = rank_layouts(config, hardware, args.gpus, per_node, flash, grad_dtype)
        current = ranking.position(**vars(layout)) if plan.ok else None
        if args.json:
            print(json.dumps(ranking_json(ranking, args.top, args.by_mesh, current), indent=2))
        else:
            print_ranking(ranking, args.top, args.by_mesh, current=current)
        return 0 if ranking.plans else 1
    if args.json:
        print(json.dumps(plan_json(plan, config, args.gpus), indent=2))
    else:
        print_plan(plan, config, args.gpus)
    return 0 if plan.ok else 1
