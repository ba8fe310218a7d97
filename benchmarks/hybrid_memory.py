"""Hybrid sharding's memory and traffic against `trident plan`: the 530B preset at ZeRO-3 on tp8 x pp35 x dp8
(2,240 ranks) with parallel.dp_shard K = 2, 4 and 8 (8: plain ZeRO-3 over dp).

For each K, the first rank of the first stage runs the trainer's real code for one full global batch of
8 sequences under `trident rehearse`'s setting (torch's fake process group, FakeTensorMode;
rehearse/rank.py), and this script reports its weights, gradients, optimizer state (the sharded
state: 1/K each at ZeRO-3) and peak beside the plan's; and the bytes a rank sends a step inside its
shard group and across the replicas (layout_rules.dp_bytes_per_step; tests/test_hybrid_sharding.py
checks the trainer's logged bytes against it) with the plan's data-parallel seconds on DGX A100. With
tp8 filling a node, every DP group of this layout spans nodes: both parts run on the inter-node fabric
and K trades memory for nothing on the link (with shard groups inside a node the plan puts them on NVLink).

    python benchmarks/hybrid_memory.py
"""
from __future__ import annotations

import time

from common import emit_json, print_table

from trident.config import load_config
from trident.hardware import load_hardware
from trident.parallel.layout_rules import dp_bytes_per_step
from trident.plan.memory import Layout, memory_per_gpu, micro_batches
from trident.plan.time import gradient_sync_seconds
from trident.rehearse.rank import rehearse_rank
from trident.rehearse.run import planned

GPUS = 2240
GIB = 2**30
SETTINGS = ["parallel.zero_stage=3", "train.global_batch_size=8", "train.rampup_batch_size=null",
            "model.vocab_size=50257"]


def measure(shard: int) -> dict:
    config = load_config("mtnlg-530b", SETTINGS + [f"parallel.dp_shard={shard}"])
    config.validate(GPUS)
    began = time.perf_counter()
    result = rehearse_rank(config, GPUS, 0)
    plan = planned(config, GPUS, 0)
    layout = Layout.from_config(config, GPUS, grad_dtype="fp32")
    params = round(memory_per_gpu(config, layout, True).params)
    micro = micro_batches(config, layout)
    inside = dp_bytes_per_step(3, layout.shard, params, 2, micro, 4)
    total = dp_bytes_per_step(3, layout.gradient_group, params, 2, micro, 4, shard=layout.shard)
    seconds = gradient_sync_seconds(config, layout, load_hardware("a100-80gb"), 8)
    measured = result["measured"]
    return {"K": shard, **{f"{c}_gib": measured[c] / GIB for c in ("weights", "gradients", "optimizer", "peak")},
            **{f"plan_{c}_gib": plan[c] / GIB for c in ("weights", "gradients", "optimizer", "total")},
            "bytes_inside_node": inside, "bytes_across_nodes": total - inside, "plan_dp_seconds": seconds,
            "seconds": round(time.perf_counter() - began, 1)}


def main() -> None:
    rows = [measure(k) for k in (2, 4, 8)]
    print_table("530B, ZeRO-3, tp8 x pp35 x dp8, first rank: measured (rehearsal) / plan",
                ["K", "weights GiB", "gradients GiB", "optimizer GiB", "peak GiB", "plan peak GiB",
                 "GB in shard group / across replicas", "plan DP s a step (A100)", "s"],
                [[r["K"], f"{r['weights_gib']:.2f} / {r['plan_weights_gib']:.2f}",
                  f"{r['gradients_gib']:.2f} / {r['plan_gradients_gib']:.2f}",
                  f"{r['optimizer_gib']:.2f} / {r['plan_optimizer_gib']:.2f}", f"{r['peak_gib']:.2f}",
                  f"{r['plan_total_gib']:.2f}", f"{r['bytes_inside_node'] / 1e9:.1f} / {r['bytes_across_nodes'] / 1e9:.1f}",
                  f"{r['plan_dp_seconds']:.2f}", r["seconds"]] for r in rows])
    emit_json("hybrid_memory", {"rows": rows})


if __name__ == "__main__":
    main()
