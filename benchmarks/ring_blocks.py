"""Ring attention's block paths against SDPA on one device (issue 59 item 5): is the ring's attention as
fast as the fused kernel a run without context parallelism uses?

One causal attention layer under bf16 autocast, forward + backward (dO = 1), at sequence S (default
16384 on CUDA, 512 on the CPU, where it is a smoke run; batch 1, 16 heads of 128): SDPA over the whole sequence, then
ring_attention on one rank (one diagonal block: the block path alone, no exchange) with its fused
kernel blocks (CUDA flash on a GPU, torch's CPU flash kernel on the CPU) and with its fp32 matmul blocks
(what CUDA ran before issue 59). Times are medians of the repeats after a warm-up, synchronised on the
device; the ratio is each against SDPA in the same process (target for the kernel blocks: <= 1.2).

    python benchmarks/ring_blocks.py [--device cuda|cpu] [--seq S] [--repeats R]
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from common import emit_json, median, print_table
from trident.parallel import context_blocks
from trident.parallel.context import ring_attention

HEADS, HEAD_DIM = 16, 128


def _pass(attend, q, k, v, device: str) -> float:
    """Seconds of one forward + backward under bf16 autocast, the device synchronised around it."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.autocast(device, torch.bfloat16):
        out = attend(*leaves)
    out.float().sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seq", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    seq = args.seq or (16384 if args.device == "cuda" else 512)
    gen = torch.Generator().manual_seed(0)
    # bf16, as the QKV projection hands them to attention under autocast
    q, k, v = (torch.randn(1, HEADS, seq, HEAD_DIM, generator=gen).to(args.device, torch.bfloat16) for _ in range(3))
    paths = {"sdpa": (lambda *t: F.scaled_dot_product_attention(*t, is_causal=True), True),
             "ring, kernel blocks": (lambda *t: ring_attention(*t, None), True),
             "ring, fp32 matmul blocks": (lambda *t: ring_attention(*t, None), False)}
    seconds = {}
    for name, (attend, kernels) in paths.items():
        context_blocks.USE_CPU_KERNEL = context_blocks.USE_CUDA_KERNELS = kernels
        seconds[name] = median([_pass(attend, q, k, v, args.device) for _ in range(args.repeats + 1)][1:])
    rows = [[name, f"{1000 * s:.1f}", f"{s / seconds['sdpa']:.2f}"] for name, s in seconds.items()]
    print_table(f"causal attention, forward + backward, bf16 autocast, {args.device}, S={seq}, b1 h{HEADS} d{HEAD_DIM}",
                ["path", "ms", "x SDPA"], rows)
    emit_json("ring_blocks", {"device": args.device, "seq": seq, "seconds": seconds,
                              "kernel_ratio": seconds["ring, kernel blocks"] / seconds["sdpa"],
                              "matmul_ratio": seconds["ring, fp32 matmul blocks"] / seconds["sdpa"]})


if __name__ == "__main__":
    main()
