"""Per-rank parameter, gradient and optimizer bytes for DP = 1, 2, 4 at ZeRO stages 0-3, fp32 and bf16,
counted from the tensors each rank actually holds after a real training step.

Each layout runs `dp` gloo processes that build trident's Trainer, train one step (all ranks must
report the same loss), then count:
- parameters: the flat parameter buffer (model dtype), `trainer.model.param_buffers.params`;
- gradients: the flat fp32 gradient buffer, `trainer.model.grad_buffers.grads` (trident accumulates in fp32);
- optimizer: the tensors of `trainer.model.optimizer` (fp32 master when separate, Adam m and v), each
  counted once; a fp32 master that is a view of the parameter
  buffer (fp32 training) is not separate memory and is not counted. Checked against
  `optimizer.state_bytes()`.
Set beside docs/reference.md's model of mixed-precision Adam: 16 bytes/param (bf16 weights 2, grads 2,
fp32 master 4, m 4, v 4) to 20 (fp32 gradients or extra buffers), with ZeRO-1 dividing the
master + m + v part (12 bytes) by dp, ZeRO-2 the gradients too and ZeRO-3 the weights too
(docs/training.md, "ZeRO stages"; at stages 2 and 3 the buffers hold the owned slices only).

    python benchmarks/zero_memory.py [--quick]
"""
from __future__ import annotations

import argparse
import tempfile

import torch

from common import RandomTokens, emit_json, load_average, make_config, print_table, run_ranks

MODEL = ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=64",
         "model.vocab_size=4096", "model.make_vocab_size_divisible_by=128", "train.micro_batch_size=1",
         "train.global_batch_size=4", "parallel.bucket_size_mb=1"]
QUICK_MODEL = ["model.num_layers=2", "model.hidden_size=128", "model.num_heads=4", "model.seq_length=32",
               "model.vocab_size=1024", "model.make_vocab_size_divisible_by=128", "train.micro_batch_size=1",
               "train.global_batch_size=4", "parallel.bucket_size_mb=0.25"]


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _worker(rank, world, overrides):
    from trident.train.trainer import Trainer

    config = make_config("demo", overrides)
    m = config.model
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out, datasets=(RandomTokens(m.seq_length, m.vocab_size), None),
                          vocab_size=m.vocab_size, log=lambda *a: None)
        loss = trainer.train_step()["loss"]
    params, grads, opt = trainer.model.param_buffers.params, trainer.model.grad_buffers.grads, trainer.model.optimizer
    masters = [t for t in opt.master if not _shares_memory(t, params)]
    optimizer = {"master": sum(map(_nbytes, masters)), "exp_avg": sum(map(_nbytes, opt.exp_avg)),
                 "exp_avg_sq": sum(map(_nbytes, opt.exp_avg_sq))}
    return {"loss": loss, "params_count": sum(p.numel() for _, p in trainer.model.named_params),
            "param_bytes": _nbytes(params), "grad_bytes": _nbytes(grads),
            "optimizer": optimizer, "optimizer_total": sum(optimizer.values()),
            "state_bytes": opt.state_bytes(), "owned_elements": sum(hi - lo for lo, hi in opt.ranges),
            "buffer_elements": params.numel()}


def theory_bytes_per_param(precision: str, dp: int, stage: int) -> dict:
    """docs/reference.md's model (16-bit grads) and trident's layout (fp32 grads), at ZeRO `stage`."""
    weight = 2 if precision == "bf16" else 4
    states = (4 if precision == "bf16" else 0) + 8  # separate fp32 master only when training in 16 bits
    shard = [dp if stage >= level else 1 for level in (3, 2, 1)]  # weights, gradients, optimizer
    return {"reference": weight / shard[0] + weight / shard[1] + states / shard[2] if precision == "bf16" else None,
            "trident": weight / shard[0] + 4 / shard[1] + states / shard[2]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller model")
    args = parser.parse_args()
    model = QUICK_MODEL if args.quick else MODEL
    rows, results = [], []
    for precision in ("fp32", "bf16"):
        for dp in (1, 2, 4):
            for zero in ((0,) if dp == 1 else (0, 1, 2, 3)):
                overrides = model + [f"train.precision={precision}", f"parallel.zero_stage={zero}",
                                     "train.rampup_batch_size=null", "train.eval_interval=0", "train.steps=10",
                                     "train.device=cpu"]
                ranks = run_ranks(_worker, dp, overrides, threads=1)
                if len({r["loss"] for r in ranks}) != 1:
                    raise RuntimeError(f"dp={dp} zero={zero} {precision}: ranks disagree on the loss")
                worst = max(ranks, key=lambda r: r["param_bytes"] + r["grad_bytes"] + r["optimizer_total"])
                n = worst["params_count"]
                total = worst["param_bytes"] + worst["grad_bytes"] + worst["optimizer_total"]
                theory = theory_bytes_per_param(precision, dp, zero)
                entry = {"precision": precision, "dp": dp, "zero_stage": zero, "params": n, "loss": worst["loss"],
                         "per_rank": ranks, "bytes_per_param": total / n,
                         "optimizer_bytes_per_param": worst["optimizer_total"] / n, "theory": theory,
                         "state_bytes_agrees": all(r["state_bytes"] == r["optimizer_total"] for r in ranks)}
                results.append(entry)
                mib = 2**20
                rows.append([precision, dp, f"ZeRO-{zero}" if zero else "-", f"{n:,}",
                             f"{worst['param_bytes'] / mib:.2f}",
                             f"{worst['grad_bytes'] / mib:.2f}", f"{worst['optimizer_total'] / mib:.2f}",
                             f"{entry['optimizer_bytes_per_param']:.2f}", f"{entry['bytes_per_param']:.2f}",
                             f"{theory['trident']:.2f}",
                             "-" if theory["reference"] is None else f"{theory['reference']:.2f}"])
                print(f"{precision} dp={dp} zero={zero}: {entry['bytes_per_param']:.2f} B/param", flush=True)
    print_table("Per-rank memory (largest rank), MiB and bytes per parameter",
                ["precision", "DP", "ZeRO", "params", "params MiB", "grads MiB", "optimizer MiB", "opt B/param",
                 "total B/param", "expected (fp32 grads)", "reference (16-bit grads)"], rows)
    emit_json("zero_memory", {"results": results, "load": load_average()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
