"""Planner against rehearsal: `trident plan`'s memory per rank beside what `trident rehearse` measures
when the real training code runs that rank (fake process group, fake tensors), for these layouts:

- mtnlg-530b at TP8 x PP35 x DP8 on 2,240 GPUs (ZeRO-1, full recompute, 1F1B: the paper's layout);
- mtnlg-530b at TP8 x PP15 x DP8 on 960 GPUs, interleaved 1F1B with 7 virtual stages (no batch ramp-up:
  its 32-sequence steps are not a multiple of 15 micro-batches; the rehearsal steps a full batch anyway);
- gpt-1.3b at TP2 x PP2 x DP2 on 8 GPUs without recompute;
- user-like layouts of the small presets (issue 25): gpt-125m at TP2 x PP2 x DP2 with sequence
  parallelism, ZeRO-1 and selective recompute in bf16; at DP4 in fp32 without recompute; at PP4 x DP2
  interleaved (3 virtual stages) with full recompute; gpt-1.3b at TP4 x DP2 with ZeRO-1 and full
  recompute; a 12-layer model (hidden 512, 8 heads, sequence 1024, vocabulary 32,000) at TP2 x PP2 x DP2
  in fp16 without recompute.

- mtnlg-530b at ZeRO-3 on TP8 x PP35 with DP = 2, 4, 8 (560, 1,120 and 2,240 GPUs; issue 46): the first
  stage's rank only, to show its static memory (weights, gradients, optimizer state) falling as 1/dp as the
  plan says (`--only 530b-zero3-dp2 530b-zero3-dp4 530b-zero3-dp8`); a global batch of 280 sequences (35 to 140
  micro-batches: every micro-batch the first stage holds is in flight, as at 1,920), so the rank steps in minutes.

The plan compared is the CPU's program (what the rehearsal runs: CPU autocast, gloo's overlapped
pipeline contract); "plan CUDA GiB" is the same rank planned for GPUs (docs/planner.md).

Each layout rehearses the first rank of its first, a middle and its last pipeline stage, every rank
in a fresh process; the table prints measured / planned per category and the seconds and resident
memory each rank took (targets: peak within 10% of the plan; < 2 min and < 4 GB a 530B rank).

    python benchmarks/rehearse_plan.py [--only NAME ...]
"""
from __future__ import annotations

import argparse

from common import emit_json, print_table

from trident.config import load_config
from trident.rehearse.rank import CATEGORIES
from trident.rehearse.run import comparison_rows, rehearse

LAYOUTS = {
    "530b-pp35": ("mtnlg-530b", [], 2240),
    "530b-pp15-interleaved": ("mtnlg-530b", ["parallel.pp=15", "parallel.schedule=interleaved",
                                             "parallel.virtual_stages=7", "train.rampup_batch_size=null"], 960),
    "1.3b-tp2-pp2-dp2": ("gpt-1.3b", ["parallel.tp=2", "parallel.pp=2", "parallel.zero_stage=1",
                                      "train.activation_checkpointing=none"], 8),
    "125m-tp2-pp2-dp2-sp-selective": ("gpt-125m", ["parallel.tp=2", "parallel.pp=2", "parallel.zero_stage=1",
                                                   "parallel.sequence_parallel=true",
                                                   "train.activation_checkpointing=selective"], 8),
    "125m-dp4-fp32": ("gpt-125m", ["train.precision=fp32", "train.activation_checkpointing=none"], 4),
    "125m-pp4-interleaved-full": ("gpt-125m", ["parallel.pp=4", "parallel.schedule=interleaved",
                                               "parallel.virtual_stages=3", "train.activation_checkpointing=full"], 8),
    "1.3b-tp4-dp2-zero1-full": ("gpt-1.3b", ["parallel.tp=4", "parallel.zero_stage=1",
                                             "train.activation_checkpointing=full"], 8),
    "12layer-tp2-pp2-dp2-fp16": ("gpt-125m", ["model.hidden_size=512", "model.num_heads=8", "model.seq_length=1024",
                                              "model.vocab_size=32000", "parallel.tp=2", "parallel.pp=2",
                                              "train.precision=fp16", "train.activation_checkpointing=none",
                                              "train.global_batch_size=64", "train.micro_batch_size=4"], 8),
}
for _dp in (2, 4, 8):
    LAYOUTS[f"530b-zero3-dp{_dp}"] = ("mtnlg-530b", ["parallel.zero_stage=3", f"parallel.dp={_dp}",
                                                  "train.global_batch_size=280"], 280 * _dp)
FIRST_RANK_ONLY = {name for name in LAYOUTS if "-zero3-" in name}  # the static memory of a stage-0 rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(LAYOUTS), help="rehearse these layouts only")
    args = parser.parse_args()
    rows, figures = [], {}
    for name, (preset, overrides, gpus) in LAYOUTS.items():
        if args.only and name not in args.only:
            continue
        config = load_config(preset, overrides + ["train.rampup_batch_size=null"])
        config.validate(gpus)
        result = rehearse(config, gpus, [0] if name in FIRST_RANK_ONLY else None,
                          on_rank=lambda rank, name=name: print(name, _row(rank), flush=True))
        figures[name] = result
        rows += [[name, *_row(rank)] for rank in result["ranks"]]
    print_table("planner vs rehearsal, memory per rank (m/p: measured / planned)",
                ["layout", "rank", "stage", "peak GiB", "plan GiB", "plan CUDA GiB", *[f"{c} m/p" for c in CATEGORIES],
                 "peak m/p", "s", "RSS GiB"], rows)
    emit_json("rehearse_plan", {"layouts": figures})


def _row(rank: dict) -> list:
    """One rank's table row (after the layout's name): measured / planned per category."""
    ratios = {category: measured / plan if plan else float("nan")
              for category, measured, plan in comparison_rows(rank)}
    gib = [rank["measured"]["peak"], rank["plan"]["total"], rank["plan_cuda"]["total"]]
    return ([rank["rank"], rank["stage"], *[f"{value / 2**30:.2f}" for value in gib]]
            + [f"{ratios[c]:.3f}" for c in (*CATEGORIES, "peak")]
            + [f"{rank['seconds']:.0f}", f"{rank['rss_peak_bytes'] / 2**30:.2f}"])


if __name__ == "__main__":
    main()
