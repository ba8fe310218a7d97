"""Ring attention (parallel/context.py) on cp 2 and 4 against attention over the whole sequence in one
process (issue 53): is the causal work balanced across the ranks, what does the ring cost on top of the
work, and are the bytes the formula's?

One attention layer, forward + backward, at sequence S (default 4096; batch 1, 8 heads of 64, fp32),
on gloo ranks of one thread each. Per rank: CPU time (this process's, gloo's threads included: the
work it did, which other jobs on the cores do not inflate), wall time, the time spent waiting on ring
exchanges (the flight recorder's "ring attention" events) and the bytes sent (RING_TRAFFIC) against
`ring_attention_bytes`. Medians over the repeats after one warm-up. Balance: the busiest rank's CPU
time over the least busy one's (target <= 1.15: the load-balanced chunks). Work: the ranks' summed CPU
time over one process's SDPA. Also timed: torch's own ring attention (torch.distributed.tensor.experimental,
its head-tail load balance and all-gathered K/V) over the same CPU flash kernel.

    python benchmarks/ring_attention.py [--seq S] [--repeats R] [--quick]
"""
from __future__ import annotations

import argparse

from common import Timer, emit_json, median, print_table, run_ranks

HEADS, HEAD_DIM = 8, 64


def _torch_ring(q, k, v):
    """torch's own ring attention (torch.distributed.tensor.experimental, private in torch 2.x: head-tail
    load balance, K/V all-gathered) over its CPU flash kernel, forward then backward with dO = 1."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.experimental._context_parallel import _attention as torch_cp

    forward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    world = dist.group.WORLD
    out, lse, *_ = torch_cp._templated_ring_attention(world, 2, forward, query=q, key=k, value=v, is_causal=True,
                                                      dropout_p=0.0)
    torch_cp._templated_ring_attention_backward(world, 2, backward, torch.ones_like(out), "grad_out", q, k, v, out, lse,
                                                True, dropout_p=0.0)


def _worker(rank, world, seq, repeats, how):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from trident.parallel.context import RING_TRAFFIC, ring_attention
    from trident.parallel.layout_rules import ring_attention_bytes
    from trident.parallel.context_chunks import split_for_rank
    from trident.parallel.flight import FLIGHT

    gen = torch.Generator().manual_seed(0)
    full = [torch.randn(1, HEADS, seq, HEAD_DIM, generator=gen) for _ in range(3)]
    local = [split_for_rank(t, 2, world, rank).requires_grad_() for t in full]
    passes = {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward(),
              "ring": lambda q, k, v: ring_attention(q, k, v, None).sum().backward(),  # the world is the CP group
              "torch": lambda q, k, v: _torch_ring(*(t.detach() for t in (q, k, v)))}
    cpu, wall, wait = [], [], []
    for repeat in range(repeats + 1):
        dist.barrier()
        RING_TRAFFIC.reset()
        first = FLIGHT.seq
        with Timer() as timer:
            passes[how](*local)
        if repeat:  # the first is a warm-up
            cpu.append(timer.cpu)
            wall.append(timer.wall)
            wait.append(sum(e["ended"] - e["started"] for e in FLIGHT.snapshot()
                            if e["seq"] > first and e["op"].startswith("ring attention")))
    sent = (RING_TRAFFIC.forward_bytes, RING_TRAFFIC.backward_bytes)
    formula = ring_attention_bytes(local[1].numel(), local[1].element_size(), world)
    return {"cpu": median(cpu), "wall": median(wall), "wait": median(wait), "sent": sent, "formula": formula}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=4096, help="sequence length (a multiple of 8)")
    parser.add_argument("--repeats", type=int, default=3, help="timed forward + backward passes")
    parser.add_argument("--quick", action="store_true", help="sequence 1024, 2 repeats")
    args = parser.parse_args()
    seq, repeats = (1024, 2) if args.quick else (args.seq, args.repeats)
    runs = {"sdpa": run_ranks(_worker, 1, seq, repeats, "sdpa")}
    for cp in (1, 2, 4):
        runs[f"ring cp{cp}"] = run_ranks(_worker, cp, seq, repeats, "ring")
    for cp in (2, 4):
        runs[f"torch's ring cp{cp}"] = run_ranks(_worker, cp, seq, repeats, "torch")
    base = runs["sdpa"][0]["cpu"]
    rows, summary = [], {}
    for name, ranks in runs.items():
        cpus = [r["cpu"] for r in ranks]
        summary[name] = {"balance": max(cpus) / min(cpus), "work": sum(cpus) / base,
                         "bytes_match": name.startswith("torch") or all(r["sent"] == r["formula"] for r in ranks),
                         "ranks": ranks}
        for rank, r in enumerate(ranks):
            rows.append([name, rank, r["cpu"], r["wall"], r["wait"], r["sent"][0] / 2**20, r["sent"][1] / 2**20,
                         "-" if name.startswith("torch") else "yes" if r["sent"] == r["formula"] else "NO"])
    print_table(f"one attention layer, forward + backward, S={seq}, {HEADS} heads x {HEAD_DIM}, fp32, 1 thread a rank",
                ["run", "rank", "CPU s", "wall s", "ring wait s", "MiB sent fwd", "MiB sent bwd", "= formula"], rows)
    print_table("per run", ["run", "balance (max/min CPU)", "work (sum CPU / SDPA's)"],
                [[name, s["balance"], s["work"]] for name, s in summary.items()])
    emit_json("ring_attention", {"seq": seq, "repeats": repeats, "runs": summary})
    return 0 if all(s["bytes_match"] for s in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
