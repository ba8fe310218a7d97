"""Which attention kernel and which AdamW kernel trident's training step runs on a device.

One bf16 training step (forward, backward, optimizer step) through `parallelize` on one process,
under torch.profiler; prints the scaled-dot-product-attention op that ran (flash, memory-efficient,
cuDNN, or the math fallback) and the optimizer's AdamW kernel (its `kernel`, and whether
aten::_fused_adamw_ ran). On CUDA the shape is gpt-1.3b's layer (hidden 2048, 16 heads of 128,
seq 2048; one layer, micro-batch 1) and the exit status is 1 unless attention avoided the math
fallback and AdamW ran fused; on CPU a small shape, report only.

    python benchmarks/gpu_kernels.py [--device cuda|cpu]
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import profile

from common import emit_json, make_config

ATTENTION_OPS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math (fallback)",
}
STEP = ["model.num_layers=1", "train.micro_batch_size=1", "train.global_batch_size=1", "train.precision=bf16"]
CPU_SHAPE = ["model.hidden_size=256", "model.num_heads=2", "model.seq_length=256", "model.vocab_size=1024"]


def profiled_step(device: torch.device) -> tuple[set[str], str]:
    """The profiler's op names during one training step, and the optimizer's `kernel`."""
    from trident.parallel.mesh import build_mesh
    from trident.parallel.parallelize import parallelize

    config = make_config("gpt-1.3b", STEP + (CPU_SHAPE if device.type == "cpu" else []))
    model = parallelize(config, build_mesh(1, 1, 1), device)
    m = config.model
    tokens = torch.randint(0, m.vocab_size, (1, m.seq_length + 1), device=device)
    with profile() as prof:
        model.forward_backward([(tokens[:, :-1], tokens[:, 1:])], 1)
        model.finalize_gradients()
        model.step(config.train.lr)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return {event.name for event in prof.events()}, model.optimizer.kernel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    device = torch.device(args.device)
    names, kernel = profiled_step(device)
    attention = sorted(label for op, label in ATTENTION_OPS.items() if op in names) or ["none found"]
    fused_ran = "aten::_fused_adamw_" in names
    print(f"attention kernel on {device.type}: {', '.join(attention)}")
    print(f"AdamW kernel on {device.type}: optimizer.kernel={kernel!r}, aten::_fused_adamw_ "
          f"{'ran' if fused_ran else 'did NOT run'}")
    ok = attention != ["none found"] and "math (fallback)" not in attention and kernel == "fused" and fused_ran
    emit_json("gpu_kernels", {"device": device.type, "attention": attention, "optimizer_kernel": kernel,
                              "fused_adamw_ran": fused_ran, "ok": ok})
    if device.type == "cuda" and not ok:
        print("FAIL: expected flash/memory-efficient/cuDNN attention and the fused AdamW kernel")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
