"""Model FLOPs utilisation of trident's training step on one device, and bf16 against fp32.

CPU (default): the 125M config (gpt-125m) at seq 1024, micro-batch 1 x 2 accumulated, fp32, one process, against
this CPU's matmul peak measured in the same run (target: MFU >= 65%); then bf16 tokens/s against
fp32 tokens/s (target >= 1.5x), one after the other, on the 125M width (hidden 768, 12 heads) with
2 layers and seq 128 unless --full-bf16 (bf16 on a CPU without native bf16 matmul is several times
slower than fp32, and the full model would take minutes a step). With
`--compile` each case also runs with train.compile=true, and the table says whether the trainer
actually compiled anything. Steps are timed by wall clock and by process CPU time (1 thread by
default), and the matmul peak by the same two clocks: on a shared machine the CPU-time MFU is the
work-rate figure.

GPU (--device cuda, not runnable on this machine): the 1.3B config (gpt-1.3b) at seq 2048, bf16,
MFU by wall clock (the trainer synchronises the device each step) against the card's dense bf16
peak (trident.hardware.GPU_PEAKS, by the exact name the driver reports; an unknown card is refused:
give --peak-tflops; target >= 55% on an H100/H200-class card, beside MT-NLG's ~40% on A100).
benchmarks/gpu.sh runs it (30 timed steps) and rehearses the same case (GPU_CASE).

FLOPs are counted by trident.flops' convention (CONVENTION below, docs/training.md#mfu), printed
with the results. With --compile, "compiled" says how many blocks torch.compile wraps (the trainer
wraps each block's forward) and how many graphs dynamo compiled during the run.

    python benchmarks/mfu.py [--quick] [--compile] [--threads N] [--device cpu|cuda] [--peak-tflops T]
"""
from __future__ import annotations

import argparse
import tempfile

import torch

from common import RandomTokens, Timer, emit_json, load_average, make_config, matmul_peak_tflops, median, print_table

CPU_MODEL = ["model.seq_length=1024", "train.micro_batch_size=1", "train.global_batch_size=2"]
CPU_QUICK = ["model.seq_length=256", "train.micro_batch_size=1", "train.global_batch_size=1"]
BF16_MODEL = ["model.num_layers=2", "model.seq_length=128", "train.micro_batch_size=1", "train.global_batch_size=1"]
GPU_MODEL = ["model.seq_length=2048", "train.micro_batch_size=4", "train.global_batch_size=8",
             "train.activation_checkpointing=none"]
GPU_CASE = GPU_MODEL + ["train.precision=bf16", "train.rampup_batch_size=null"]  # gpt-1.3b on one GPU


def build_trainer(preset: str, overrides: list[str], out: str):
    from trident.train.trainer import Trainer

    config = make_config(preset, overrides + ["train.rampup_batch_size=null", "train.eval_interval=0",
                                              "train.steps=1000000"])
    m = config.model
    trainer = Trainer(config, out, datasets=(RandomTokens(m.seq_length, m.vocab_size, n=64), None),
                      vocab_size=m.vocab_size, log=lambda *a: None)
    return config, trainer


CONVENTION = ("model FLOPs (trident.flops): 2 per multiply-add, forward + backward = 3 forwards, attention's "
              "s x s products whole (no causal halving), the output head forward + backward once, "
              "activation recomputation not counted")


def compiled(trainer) -> dict:
    """Blocks torch.compile wraps, and graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    from trident.parallel.parallelize import compiled_blocks

    return {"blocks": compiled_blocks(trainer.model.chunks), "graphs": counters["stats"]["unique_graphs"]}


def flops_per_step(config) -> float:
    from trident.flops import block_weights, model_flops

    m = config.model
    return model_flops(config.train.global_batch_size, m.seq_length, m.num_layers, m.hidden_size,
                       m.padded_vocab_size(), block_weights(m))


def run_case(name: str, preset: str, overrides: list[str], steps: int, warmup: int, device: str,
             peak_tflops: float = 0.0) -> dict:
    """Train `warmup + steps` steps; medians of the timed ones, MFU by both clocks."""
    with tempfile.TemporaryDirectory() as out:
        config, trainer = build_trainer(preset, overrides + [f"train.device={device}"], out)
        dtype = torch.float32 if config.train.precision == "fp32" else torch.bfloat16
        peaks = [matmul_peak_tflops(dtype, device, configured=peak_tflops)]
        walls, cpus, losses = [], [], []
        for index in range(warmup + steps):
            with Timer() as timer:
                record = trainer.train_step()
            losses.append(record["loss"])
            if index >= warmup:
                walls.append(timer.wall)
                cpus.append(timer.cpu)
        peaks.append(matmul_peak_tflops(dtype, device, configured=peak_tflops))
        applied = compiled(trainer)
        peak_bytes = record["peak_memory_bytes"]
    flops = flops_per_step(config)
    tokens = config.train.global_batch_size * config.model.seq_length
    peak = {clock: sum(p[clock] for p in peaks) / len(peaks) for clock in ("wall", "cpu")}
    wall, cpu = median(walls), median(cpus)
    result = {"case": name, "precision": config.train.precision, "compile_requested": config.train.compile,
              "compile_applied": applied, "layers": config.model.num_layers, "hidden": config.model.hidden_size,
              "seq": config.model.seq_length, "tokens_per_step": tokens, "flops_per_step": flops,
              "wall_s": wall, "cpu_s": cpu, "tokens_per_s": tokens / wall, "tokens_per_cpu_s": tokens / cpu,
              "tflops_wall": flops / wall / 1e12, "peak_tflops": peak, "peaks": peaks,
              "mfu_wall": flops / wall / 1e12 / peak["wall"], "mfu_cpu": flops / cpu / 1e12 / peak["cpu"],
              "losses": losses, "peak_memory_bytes": peak_bytes, "steps": {"wall": walls, "cpu": cpus},
              "load": load_average()}
    # A GPU step's host CPU time says nothing about the card: there the wall-clock MFU is the figure.
    result["mfu"] = result["mfu_wall"] if device == "cuda" else result["mfu_cpu"]
    print(f"{name}: {wall:.2f}s wall / {cpu:.2f}s CPU a step, MFU {result['mfu_cpu']:.1%} (CPU) "
          f"{result['mfu_wall']:.1%} (wall), load {result['load']}", flush=True)
    return result


def compile_column(result: dict) -> str:
    if not result["compile_requested"]:
        return "no"
    applied = result["compile_applied"]
    if not applied["blocks"]:
        return "requested, NOT applied"
    return f"yes: {applied['blocks']} blocks, {applied['graphs']} graphs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seq 256 for the MFU case, fewer steps")
    parser.add_argument("--compile", action="store_true", help="also run every case with train.compile=true")
    parser.add_argument("--full-bf16", action="store_true", help="bf16 vs fp32 on the full MFU model")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (default 1)")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per case (default 2, quick 1)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--peak-tflops", type=float, default=0.0,
                        help="the device's dense bf16 (fp32 runs: fp32) TFLOP/s, for a GPU not in trident's table")
    args = parser.parse_args()
    steps, warmup = args.steps or (1 if args.quick else 2), 1
    threads = [f"train.threads={args.threads}"] if args.device == "cpu" else []
    torch.set_num_threads(args.threads)
    compile_modes = (False, True) if args.compile else (False,)
    results = []
    if args.device == "cuda":
        for comp in compile_modes:
            results.append(run_case(f"1.3B bf16{' compile' if comp else ''}", "gpt-1.3b",
                                    GPU_CASE + [f"train.compile={str(comp).lower()}"],
                                    steps, warmup, "cuda", args.peak_tflops))
    else:
        model = CPU_QUICK if args.quick else CPU_MODEL
        for comp in compile_modes:
            results.append(run_case(f"125M fp32{' compile' if comp else ''}", "gpt-125m",
                                    model + threads + ["train.precision=fp32", f"train.compile={str(comp).lower()}"],
                                    steps, warmup, "cpu"))
        bf16_model = model if args.full_bf16 else BF16_MODEL
        for comp in compile_modes:
            for precision in ("fp32", "bf16"):
                results.append(run_case(f"bf16-vs-fp32 {precision}{' compile' if comp else ''}", "gpt-125m",
                                        bf16_model + threads + [f"train.precision={precision}",
                                                                f"train.compile={str(comp).lower()}"],
                                        steps, warmup, "cpu"))
    rows = [[r["case"], f"{r['layers']}x{r['hidden']}, s={r['seq']}", r["precision"],
             compile_column(r),
             r["wall_s"], r["cpu_s"], r["tokens_per_s"], r["tokens_per_cpu_s"], f"{r['mfu_cpu']:.1%}",
             f"{r['mfu_wall']:.1%}", f"{r['peak_tflops']['cpu'] * 1e3:.1f}"] for r in results]
    print_table(f"MFU on {args.device} ({steps} timed steps after {warmup} warm-up; medians)",
                ["case", "model", "precision", "compiled", "wall s", "CPU s", "tok/s", "tok/CPU-s", "MFU (CPU)",
                 "MFU (wall)", "peak GFLOP/CPU-s"], rows)
    print(f"FLOPs: {CONVENTION}")
    ratios = {}
    for comp in compile_modes:
        suffix = " compile" if comp else ""
        pair = {r["precision"]: r for r in results if r["case"].startswith("bf16-vs-fp32") and
                r["case"].endswith(r["precision"] + suffix)}
        if len(pair) == 2:
            ratios[f"bf16_over_fp32{suffix.replace(' ', '_')}"] = {
                "wall": pair["fp32"]["wall_s"] / pair["bf16"]["wall_s"],
                "cpu": pair["fp32"]["cpu_s"] / pair["bf16"]["cpu_s"]}
    for key, value in ratios.items():
        print(f"{key}: {value['cpu']:.3f}x by CPU time, {value['wall']:.3f}x by wall time (target >= 1.5x)")
    emit_json("mfu", {"device": args.device, "threads": args.threads, "results": results, "ratios": ratios,
                      "flops_convention": CONVENTION})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
