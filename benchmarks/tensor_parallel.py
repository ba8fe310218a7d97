"""Tensor (and sequence) parallelism on this CPU: step time, collectives and bytes for TP = 1, 2, 4.

Each layout trains the same GPT for a few steps on `tp` gloo processes of 1 thread each (TP=1 is
one such process too), so TP=2 uses the machine's 2 cores and TP=4 oversubscribes them 2x.
In the workers, torch.distributed's collectives are wrapped to record (op, group, forward or
backward, payload bytes). Collectives per transformer block come from the difference between a
model of L and one of L/2 layers, so nothing about the model's structure is assumed; they are set
beside Megatron's theory per block and micro-batch:
- without SP: 2 all-reduces forward (attention proj, fc2) + 2 backward (qkv, fc1 input grads),
  each of s*b*h elements;
- with SP: 2 all-gathers + 2 reduce-scatters forward, the same backward, each of s*b*h elements:
  the same ring volume, since an all-reduce is a reduce-scatter plus an all-gather.
Bytes: payload = the full tensor a collective works on (all-reduce: the tensor; all-gather: its
output; reduce-scatter: its input); ring wire bytes per rank = payload * 2(n-1)/n for all-reduce,
payload * (n-1)/n for all-gather / reduce-scatter.

    python benchmarks/tensor_parallel.py [--quick] [--steps N]
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch
import torch.distributed as dist

from common import RandomTokens, emit_json, load_average, make_config, median, print_table, run_ranks

MODEL = ["model.num_heads=8", "model.hidden_size=256", "model.seq_length=128", "model.vocab_size=4096",
         "train.global_batch_size=4", "train.micro_batch_size=2"]
QUICK_MODEL = ["model.num_heads=8", "model.hidden_size=128", "model.seq_length=128", "model.vocab_size=2048",
               "train.global_batch_size=4", "train.micro_batch_size=2"]
WRAPPED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather", "broadcast",
           "reduce_scatter", "send", "recv", "isend", "irecv")


class CollectiveLog:
    """Wraps torch.distributed collectives (module attributes, which trident calls at run time)."""

    def __init__(self):
        self.records: list[tuple[str, str, str, int]] = []  # (op, group, phase, payload bytes)
        self.groups: dict[int, str] = {}
        self.enabled = False
        self.originals = {name: getattr(dist, name) for name in WRAPPED}
        for name in WRAPPED:
            setattr(dist, name, self._wrap(name, self.originals[name]))

    def _wrap(self, name, original):
        def wrapper(*args, **kwargs):
            if self.enabled:
                group = kwargs.get("group", args[2] if name in ("all_reduce", "all_gather_into_tensor",
                                                               "reduce_scatter_tensor") and len(args) > 2 else None)
                phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward/step"
                self.records.append((name, self.groups.get(id(group), "world"), phase, _payload(name, args)))
            return original(*args, **kwargs)
        return wrapper


def _payload(name: str, args) -> int:
    tensor = args[0]  # all_reduce: the tensor; *_into_tensor: the output; reduce_scatter: output
    if name == "reduce_scatter_tensor":
        tensor = args[1]  # its input is the full tensor
    if isinstance(tensor, (list, tuple)):
        return sum(t.numel() * t.element_size() for t in tensor)
    return tensor.numel() * tensor.element_size()


def _worker(rank, world, overrides, steps, warmup, count_only):
    from trident.train.trainer import Trainer

    log = CollectiveLog()
    config = make_config("demo", overrides)
    m = config.model
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out, datasets=(RandomTokens(m.seq_length, m.vocab_size), None),
                          vocab_size=m.vocab_size, log=lambda *a: None)
        log.groups = {id(g): kind for kind, g in trainer.mesh.groups.items() if g is not None}
        log.enabled = True
        record = trainer.train_step()  # the counted step (every step issues the same collectives)
        log.enabled = False
        times, losses = [], [record["loss"]]
        for index in range(0 if count_only else warmup + steps):
            if dist.is_initialized():
                dist.barrier()  # every rank starts together, so time is the slowest rank's
            began = time.perf_counter()
            losses.append(trainer.train_step()["loss"])
            if index >= warmup:
                times.append(time.perf_counter() - began)
    return {"records": log.records, "times": times, "losses": losses}


def run_layout(tp: int, sp: bool, layers: int, model: list[str], steps: int, warmup: int, count_only: bool) -> dict:
    overrides = model + [f"model.num_layers={layers}", f"parallel.tp={tp}",
                         f"parallel.sequence_parallel={str(sp).lower()}", "train.rampup_batch_size=null",
                         "train.eval_interval=0", "train.steps=1000000", "train.device=cpu"]
    results = run_ranks(_worker, tp, overrides, steps, warmup, count_only, threads=1)
    step = median([max(ts) for ts in zip(*(r["times"] for r in results))]) if results[0]["times"] else None
    return {"rank0": results[0], "step_s": step}


def summarise(records) -> dict:
    """(op, group, phase) -> [count, payload bytes]."""
    table: dict = {}
    for op, group, phase, size in records:
        entry = table.setdefault(f"{op}|{group}|{phase}", [0, 0])
        entry[0] += 1
        entry[1] += size
    return table


def per_block(big: dict, small: dict, layer_diff: int, micro: int) -> dict:
    """Collectives of one transformer block and one micro-batch: (L-layer run - L/2-layer run)."""
    out = {}
    for key in set(big) | set(small):
        count = big.get(key, [0, 0])[0] - small.get(key, [0, 0])[0]
        size = big.get(key, [0, 0])[1] - small.get(key, [0, 0])[1]
        if count:
            out[key] = [count / layer_diff / micro, size / layer_diff / micro]
    return out


def theory(tp: int, sp: bool, s: int, b: int, h: int) -> dict:
    """Megatron per block per micro-batch, fp32 activations."""
    if tp == 1:
        return {}
    size = s * b * h * 4
    if not sp:
        return {"all_reduce|tp|forward/step": [2, 2 * size], "all_reduce|tp|backward": [2, 2 * size]}
    return {f"{op}|tp|{phase}": [2, 2 * size] for op in ("all_gather_into_tensor", "reduce_scatter_tensor")
            for phase in ("forward/step", "backward")}


def wire_bytes(table: dict, n: int) -> float:
    """Ring-algorithm bytes each rank sends for these collectives."""
    total = 0.0
    for key, (_, size) in table.items():
        op = key.split("|")[0]
        total += size * (2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller model and fewer steps")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (default 4, quick 2)")
    parser.add_argument("--layers", type=int, default=4, help="layers of the timed model (counts use it and half)")
    args = parser.parse_args()
    model = QUICK_MODEL if args.quick else MODEL
    steps, warmup = args.steps or (2 if args.quick else 4), 1
    config = make_config("demo", model)
    s, b, h, mb = (config.model.seq_length, config.train.micro_batch_size, config.model.hidden_size,
                   config.train.global_batch_size // config.train.micro_batch_size)
    rows, results = [], []
    base_step = None
    for tp, sp in ((1, False), (2, False), (2, True), (4, False), (4, True)):
        full = run_layout(tp, sp, args.layers, model, steps, warmup, count_only=False)
        half = run_layout(tp, sp, args.layers // 2, model, steps, warmup, count_only=True)
        big, small = summarise(full["rank0"]["records"]), summarise(half["rank0"]["records"])
        block = per_block(big, small, args.layers - args.layers // 2, mb)
        expected = theory(tp, sp, s, b, h)
        block_tp = {k: v for k, v in block.items() if "|tp|" in k}
        base_step = base_step or full["step_s"]
        step_total = sum(v[1] for v in big.values())
        entry = {"tp": tp, "sp": sp, "step_s": full["step_s"], "speedup_vs_tp1": base_step / full["step_s"],
                 "collectives_per_step": sum(v[0] for v in big.values()), "payload_bytes_per_step": step_total,
                 "wire_bytes_per_rank_per_step": wire_bytes(big, tp) if tp > 1 else 0.0,
                 "per_block_per_microbatch": block, "theory_per_block_per_microbatch": expected,
                 "matches_theory": block_tp == {k: [float(c), float(v)] for k, (c, v) in expected.items()},
                 "per_step": big, "losses": full["rank0"]["losses"], "load": load_average()}
        results.append(entry)
        measured = ", ".join(f"{k.split('|')[0].replace('_into_tensor', '').replace('_tensor', '')}"
                             f"({k.split('|')[2].split('/')[0]}) x{v[0]:g}" for k, v in sorted(block_tp.items()))
        rows.append([tp, "yes" if sp else "no", full["step_s"], f"{entry['speedup_vs_tp1']:.2f}x",
                     entry["collectives_per_step"], f"{step_total / 2**20:.1f}",
                     f"{entry['wire_bytes_per_rank_per_step'] / 2**20:.1f}", measured or "-",
                     "yes" if entry["matches_theory"] else "NO"])
        print(f"tp={tp} sp={sp}: step {full['step_s']:.3f}s, load {entry['load']}", flush=True)
    print_table(f"Tensor parallelism on CPU (gloo), {args.layers} layers, s={s} b={b} h={h}, {mb} micro-batches/step",
                ["TP", "SP", "step s", "vs TP1", "collectives/step", "payload MiB/step", "ring MiB/rank/step",
                 "per block & micro-batch (TP group)", "= theory"], rows)
    emit_json("tensor_parallel", {"layers": args.layers, "seq": s, "micro_batch": b, "hidden": h,
                                  "micro_batches": mb, "steps": steps, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
