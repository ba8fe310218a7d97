"""Context parallelism's memory and traffic against `trident plan`: one rank at seq 4096 on cp 1, 2, 4.

For each cp, rank 0 of a cp-rank layout (tp 1, pp 1, dp 1) runs the trainer's real code for one full
global batch under `trident rehearse`'s setting (torch's fake process group, FakeTensorMode: every
tensor the code allocates has its real size; rehearse/rank.py), and this script reports
- the peak activation memory of forward + backward above what was live before it (LiveBytes: every
  tensor the code creates, saved activations, ring buffers and working sets alike) beside the plan's
  activations for that rank (trident plan's CPU program, as `trident rehearse` prints it);
- the bytes the rank hands to torch.distributed for its context-parallel ring, counted by wrapping
  torch.distributed.batch_isend_irecv (the sum of every isend's tensor bytes), beside
  parallel/context.py's own RING_TRAFFIC counter and the plan's per-step ring bytes (the formula in
  docs/training.md, "Context parallelism": m L [(N-1) 4|K|e + 8N|K|], plus (N-1) 2|K|e per layer and
  micro-batch under recompute).

Model: the llama-7b preset shrunk to 4 layers of hidden 1024 (8 heads, 2 key/value heads: GQA), SwiGLU
1376 wide, vocabulary 8000, at 4096 tokens, bf16, no recompute, 2 sequences a step of micro-batch 1.

    python benchmarks/cp_memory.py [--checkpointing none|selective|full]
"""
from __future__ import annotations

import argparse
import time

import torch.distributed as dist

from common import emit_json, print_table

from trident.config import load_config
from trident.hardware import load_hardware
from trident.parallel.context import RING_TRAFFIC
from trident.plan.memory import Layout
from trident.plan.time import step_time
from trident.rehearse.rank import rehearse_rank
from trident.rehearse.run import planned

MODEL = ["model.num_layers=4", "model.hidden_size=1024", "model.num_heads=8", "model.num_kv_heads=2",
         "model.ffn_hidden_size=1376", "model.vocab_size=8000", "model.seq_length=4096",
         "train.global_batch_size=2", "train.micro_batch_size=1", "train.rampup_batch_size=null"]
MIB = 2**20


class SentBytes:
    """Wraps torch.distributed.batch_isend_irecv: sums the bytes of every isend handed to it."""

    def __init__(self):
        self.bytes = 0
        self._original = dist.batch_isend_irecv

    def __enter__(self):
        def counting(ops):
            self.bytes += sum(op.tensor.numel() * op.tensor.element_size() for op in ops if op.op is dist.isend)
            return self._original(ops)

        dist.batch_isend_irecv = counting
        return self

    def __exit__(self, *exc):
        dist.batch_isend_irecv = self._original


def measure(cp: int, checkpointing: str) -> dict:
    config = load_config("llama-7b", MODEL + [f"parallel.cp={cp}", f"train.activation_checkpointing={checkpointing}"])
    config.validate(cp)
    RING_TRAFFIC.reset()
    began = time.perf_counter()
    with SentBytes() as sent:
        result = rehearse_rank(config, cp, 0)
    plan = planned(config, cp, 0)
    layout = Layout.from_config(config, cp, grad_dtype="fp32")
    ring = step_time(config, layout, load_hardware("cpu"), cp).cp_bytes
    return {"cp": cp, "activations_mib": result["measured"]["activations"] / MIB,
            "plan_activations_mib": plan["activations"] / MIB,
            "peak_mib": result["measured"]["peak"] / MIB, "plan_peak_mib": plan["total"] / MIB,
            "ring_bytes_counted": sent.bytes, "ring_bytes_context": RING_TRAFFIC.forward_bytes + RING_TRAFFIC.backward_bytes,
            "ring_bytes_plan": ring, "seconds": round(time.perf_counter() - began, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpointing", default="none", choices=("none", "selective", "full"))
    args = parser.parse_args()
    rows = [measure(cp, args.checkpointing) for cp in (1, 2, 4)]
    base = rows[0]["activations_mib"]
    print_table(f"one rank at seq 4096, checkpointing={args.checkpointing}", ["cp", "activations MiB", "plan MiB", "measured/plan", "vs cp1", "plan vs cp1",
                 "ring bytes at torch.distributed", "RING_TRAFFIC", "plan ring bytes", "s"],
                [[r["cp"], f"{r['activations_mib']:,.1f}", f"{r['plan_activations_mib']:,.1f}",
                  f"{r['activations_mib'] / r['plan_activations_mib']:.3f}", f"{r['activations_mib'] / base:.3f}",
                  f"{r['plan_activations_mib'] / rows[0]['plan_activations_mib']:.3f}",
                  f"{r['ring_bytes_counted']:,}", f"{r['ring_bytes_context']:,}", f"{r['ring_bytes_plan']:,.0f}",
                  r["seconds"]] for r in rows])
    emit_json("cp_memory", {"checkpointing": args.checkpointing, "rows": rows})


if __name__ == "__main__":
    main()
