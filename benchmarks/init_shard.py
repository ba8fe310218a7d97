"""Shard-only initialisation at MT-NLG 530B scale on this CPU, with real bf16 tensors.

Rank 0 of the `mtnlg-530b` preset at TP 8 x PP 35 (DP 8: a fake process group of world 2240, so the
TP group really has 8 ranks and the mesh is the production one) builds its pipeline stage's shard with
trident.parallel.parallelize.build_model_chunks (3 layers, the embedding slice and the position table),
then one parameter, blocks.0.mlp.fc1.weight (81920 x 20480 full, 10240 x 20480 a rank), is initialised
two ways: tile by tile into the shard (trident.model.init), and the old way (draw the full fp32 tensor
from one generator, copy this rank's slice). For each: wall and CPU seconds, peak RSS of the process
(VmHWM; each measurement runs in its own process, since the peak is per process) and the peak of live
tensor bytes (torch.distributed._tools.mem_tracker.MemTracker, in a second, untimed run).

One thread, as the other benchmarks (on this shared 2-core machine two OpenMP threads make the small
per-tile copies erratic).

    python benchmarks/init_shard.py [--threads 1]   # ~2.5 minutes at 1 thread
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import Timer, emit_json, print_table

PARAM = "blocks.0.mlp.fc1.weight"
GIB = 2**30


def _memory_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _setup():
    """(config, mesh) of rank 0 in the 530B layout, on a fake process group of 2240 ranks."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from trident.config import load_config
    from trident.parallel.mesh import build_mesh

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2240)
    config = load_config("mtnlg-530b", [])
    return config, build_mesh(tp=config.parallel.tp, pp=config.parallel.pp, dp=8)


def _work(case: str):
    """A function building what `case` measures, returning the tensors it made (kept alive)."""
    import torch

    from trident.model.init import normal_tiles_
    from trident.parallel.layout import rank_layout
    from trident.parallel.parallelize import build_model_chunks
    from trident.parallel.sharding import full_shape, shard_offsets
    from trident.parallel.tensor import ColumnParallelLinear

    config, mesh = _setup()
    m, seed = config.model, config.train.seed
    if case == "stage":
        return lambda: build_model_chunks(config.model, rank_layout(config, mesh), mesh.tp_context(),
                                          seed=seed, device=torch.device("cpu"), dtype=torch.bfloat16)

    def one_parameter():
        weight = ColumnParallelLinear(m.hidden_size, m.ffn_size, bias=False, tp=mesh.tp_context(),
                                      dtype=torch.bfloat16).weight
        with torch.no_grad():
            if case == "tiled":
                normal_tiles_(weight, shard_offsets(weight), full_shape(weight), m.std, seed, PARAM)
            else:  # the old way: the full tensor from one generator, then this rank's slice
                generator = torch.Generator().manual_seed(seed)
                full = torch.empty(full_shape(weight)).normal_(0.0, m.std, generator=generator)
                weight.copy_(shard_slice(weight, full))
        return weight

    return one_parameter


def child(case: str, threads: int) -> None:
    """One measurement, in this (fresh) process; prints one JSON line."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.set_num_threads(threads)
    build = _work(case)
    rss0 = _memory_kib("VmRSS")
    with Timer() as timer:
        made = build()
    tensors = made if isinstance(made, torch.Tensor) else [p for c in made for p in c.parameters()]
    tensors = [tensors] if isinstance(tensors, torch.Tensor) else tensors
    result = {"wall_s": timer.wall, "cpu_s": timer.cpu, "rss_peak_kib": _memory_kib("VmHWM"), "rss_start_kib": rss0,
              "shard_bytes": sum(t.numel() * t.element_size() for t in tensors),
              "params": sum(t.numel() for t in tensors)}
    del made, tensors
    with MemTracker() as tracker:
        kept = build()
    result["live_peak_bytes"] = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    del kept
    print("RESULT " + json.dumps(result))


def measure(case: str, threads: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", case, "--threads", str(threads)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=["stage", "tiled", "full"])
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.threads)
    results = {case: measure(case, args.threads) for case in ("stage", "tiled", "full")}
    rows = []
    for case, what in (("stage", "stage shard (3 layers + embedding), tiled"),
                       ("tiled", f"{PARAM} shard, tiled"), ("full", f"{PARAM} shard, old full-then-slice")):
        r = results[case]
        rows.append([what, r["params"], r["shard_bytes"] / GIB, r["wall_s"], r["cpu_s"], r["rss_peak_kib"] / 2**20,
                     (r["rss_peak_kib"] - r["rss_start_kib"]) / 2**20, r["live_peak_bytes"] / GIB,
                     r["live_peak_bytes"] / r["shard_bytes"]])
    print_table(f"530B, TP8 x PP35, rank 0, bf16 on CPU, {args.threads} thread(s)",
                ["build", "params", "shard GiB", "wall s", "CPU s", "peak RSS GiB", "RSS growth GiB",
                 "peak live GiB", "live peak / shard"], rows)
    tiled, full = results["tiled"], results["full"]
    ratios = {"live_peak_full_over_tiled": full["live_peak_bytes"] / tiled["live_peak_bytes"],
              "rss_growth_full_over_tiled": (full["rss_peak_kib"] - full["rss_start_kib"])
              / (tiled["rss_peak_kib"] - tiled["rss_start_kib"]),
              "wall_full_over_tiled": full["wall_s"] / tiled["wall_s"]}
    print("\nold / tiled, one parameter: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    emit_json("init_shard", {"threads": args.threads, **results, **ratios})


if __name__ == "__main__":
    main()


def shard_slice(param, full):
    """This rank's slice of the full tensor `full` for `param`."""
    dim = getattr(param, "tp_dim", None)
    if dim is None:
        return full
    size = param.shape[dim]
    return full.narrow(dim, param.tp_rank * size, size)
