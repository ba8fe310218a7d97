"""Planner against rehearsal: `trident plan`'s memory per rank beside what `trident rehearse` measures
when the real training code runs that rank (fake process group, fake tensors), for three layouts:

- mtnlg-530b at TP8 x PP35 x DP8 on 2,240 GPUs (ZeRO-1, full recompute, 1F1B: the paper's layout);
- mtnlg-530b at TP8 x PP15 x DP8 on 960 GPUs, interleaved 1F1B with 7 virtual stages (no batch ramp-up:
  its 32-sequence steps are not a multiple of 15 micro-batches; the rehearsal steps a full batch anyway);
- gpt-1.3b at TP2 x PP2 x DP2 on 8 GPUs without recompute.

Each layout rehearses the first rank of its first, a middle and its last pipeline stage, every rank
in a fresh process; the table prints measured / planned per category and the seconds and resident
memory each rank took (targets: peak within 10% of the plan; < 2 min and < 4 GB a 530B rank).

    python benchmarks/rehearse_plan.py [--only NAME]
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
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(LAYOUTS), help="rehearse one layout")
    args = parser.parse_args()
    rows, figures = [], {}
    for name, (preset, overrides, gpus) in LAYOUTS.items():
        if args.only and name != args.only:
            continue
        config = load_config(preset, overrides)
        config.validate(gpus)
        result = rehearse(config, gpus)
        figures[name] = result
        for rank in result["ranks"]:
            ratios = {category: measured / plan if plan else float("nan")
                      for category, measured, plan in comparison_rows(rank)}
            rows.append([name, rank["rank"], rank["stage"], f"{rank['measured']['peak'] / 2**30:.2f}",
                         f"{rank['plan']['total'] / 2**30:.2f}"]
                        + [f"{ratios[c]:.3f}" for c in (*CATEGORIES, "peak")]
                        + [f"{rank['seconds']:.0f}", f"{rank['rss_peak_bytes'] / 2**30:.2f}"])
    print_table("planner vs rehearsal, memory per rank (m/p: measured / planned)", ["layout", "rank", "stage", "peak GiB", "plan GiB", *[f"{c} m/p" for c in CATEGORIES],
                 "peak m/p", "s", "RSS GiB"], rows)
    emit_json("rehearse_plan", {"layouts": figures})


if __name__ == "__main__":
    main()
