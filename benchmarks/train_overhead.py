"""trident's training step against a minimal hand-written PyTorch loop, same model and batch, same run.

Both loops train the GPT of trident.model.gpt.build_model (same seeded weights) on the same batch:
- trident: `Trainer.train_step()` (flat fp32 grad buffers, its AdamW, clipping, LR schedule, metrics);
- bare: `model(tokens, labels).mean().backward()` per micro-batch, `clip_grad_norm_`, `torch.optim.AdamW`
  (PyTorch's default foreach implementation); bf16 the standard AMP recipe (fp32 weights + autocast).
Steps alternate in A B B A order so machine-load drift hits both alike; the figures are medians over
the timed steps (after warm-up), and the ratio is median(bare time) / median(trident time),
i.e. trident tokens/s over bare tokens/s (target >= 0.95). Every step is timed twice: wall clock and
this process's CPU time; with 1 thread (the default) the CPU time is the work done, unaffected by
other jobs taking the cores, so the CPU-time ratio is the one to trust on a shared machine. MFU is
against the matmul peak measured in the same run, before and after, by the same two clocks
(common.matmul_peak_tflops: 1024^3 matmuls for 2 s; on a GPU the card's known peak).

    python benchmarks/train_overhead.py [--quick] [--steps N] [--precisions fp32,bf16] [--profile]

--profile prints torch.profiler op tables of both loops: trident's extra ops are its overhead.
--ops N times those extra per-parameter passes (and cheaper equivalents) on N-element buffers.
"""
from __future__ import annotations

import argparse
import tempfile

import numpy as np
import torch

from common import RandomTokens, Timer, emit_json, load_average, make_config, matmul_peak_tflops, median, print_table

# Sized so matmuls dominate a step but a step stays ~1-3 s on 2 loaded cores (fp32); bf16 on a CPU
# without native bf16 matmul (AVX2) is ~30x slower, so it runs a smaller model.
MODELS = {
    "fp32": ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
             "model.vocab_size=4096", "train.global_batch_size=8", "train.micro_batch_size=4"],
    "bf16": ["model.num_layers=2", "model.hidden_size=128", "model.num_heads=4", "model.seq_length=128",
             "model.vocab_size=2048", "train.global_batch_size=4", "train.micro_batch_size=2"],
}
QUICK = ["model.num_layers=2", "train.global_batch_size=4", "train.micro_batch_size=2"]


def config_for(precision: str, quick: bool, device: str, threads: int):
    overrides = MODELS[precision] + (QUICK if quick else []) + [f"train.threads={threads}",
        f"train.precision={precision}", "train.rampup_batch_size=null", "train.eval_interval=0",
        "train.steps=1000000", f"train.device={device}"]
    return make_config("demo", overrides)


class BareLoop:
    """The minimal PyTorch loop: plain module, AdamW (decay off for 1-D params, as trident), clip 1.0."""

    def __init__(self, config, device: torch.device):
        from trident.model.gpt import build_model

        cfg, t = config.model, config.train
        self.config, self.device = config, device
        self.model = build_model(cfg, cfg.padded_vocab_size(), t.seed).to(device)
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2 and not n.endswith(".bias")]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim < 2 or n.endswith(".bias")]
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}],
                                           lr=t.lr, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps)
        self.amp = t.precision != "fp32"
        self.step_index = 0

    def train_step(self, dataset) -> float:
        t = self.config.train
        micro, batch = t.micro_batch_size, t.global_batch_size
        start = self.step_index * batch
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for offset in range(0, batch, micro):
            rows = torch.from_numpy(np.stack([dataset[start + offset + i] for i in range(micro)])).to(self.device)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
                loss = self.model(rows[:, :-1], rows[:, 1:]).float().mean() / (batch // micro)
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_grad)
        self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.step_index += 1
        return total


def measure(precision: str, steps: int, warmup: int, quick: bool, device: str, threads: int, profile: bool) -> dict:
    from trident.flops import model_flops
    from trident.train.trainer import Trainer

    config = config_for(precision, quick, device, threads)
    m = config.model
    dataset = RandomTokens(m.seq_length, m.vocab_size, n=4096)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out, datasets=(dataset, None), vocab_size=m.vocab_size, log=lambda *a: None)
        bare = BareLoop(config, trainer.device)
        peaks = [matmul_peak_tflops(dtype, device)]
        times = {"trident": {"wall": [], "cpu": []}, "bare": {"wall": [], "cpu": []}}
        losses = {"trident": [], "bare": []}
        for index in range(warmup + steps):
            for name in (("trident", "bare") if index % 2 == 0 else ("bare", "trident")):  # ABBA order
                with Timer() as timer:
                    loss = trainer.train_step()["loss"] if name == "trident" else bare.train_step(dataset)
                if index >= warmup:
                    times[name]["wall"].append(timer.wall)
                    times[name]["cpu"].append(timer.cpu)
                losses[name].append(loss)
        peaks.append(matmul_peak_tflops(dtype, device))  # before and after: the load may have moved
        profile_text = profile_step(trainer, bare, dataset) if profile else None
    flops = model_flops(config.train.global_batch_size, m.seq_length, m.num_layers, m.hidden_size,
                        m.padded_vocab_size())
    tokens = config.train.global_batch_size * m.seq_length
    peak = {clock: sum(p[clock] for p in peaks) / len(peaks) for clock in ("wall", "cpu")}
    result = {"precision": precision, "threads": threads, "params": sum(p.numel() for _, p in trainer.model.named_params),
              "tokens_per_step": tokens, "flops_per_step": flops, "peak_tflops": peak, "peaks": peaks,
              "first_losses": {k: [round(x, 5) for x in v[:3]] for k, v in losses.items()}}
    for name in ("trident", "bare"):
        entry = {}
        for clock in ("wall", "cpu"):
            step = median(times[name][clock])
            entry[clock] = {"step_s": step, "tokens_per_s": tokens / step,
                            "mfu": flops / step / 1e12 / peak[clock] if peak[clock] else 0.0,
                            "steps": times[name][clock]}
        result[name] = entry
    for clock in ("wall", "cpu"):
        # trident tokens/s over bare tokens/s; per-pair ratios cancel drift spanning a pair.
        result[f"ratio_{clock}"] = result["bare"][clock]["step_s"] / result["trident"][clock]["step_s"]
        result[f"ratio_{clock}_pairs_median"] = median(
            [b / t for t, b in zip(times["trident"][clock], times["bare"][clock])])
    result["load"] = load_average()
    if profile_text:
        result["profile"] = profile_text
    return result


def profile_step(trainer, bare, dataset, steps: int = 2, top: int = 22) -> str:
    """torch.profiler op tables (self CPU time) of a few trident steps and a few bare steps: the
    ops that trident runs and the bare loop does not are its overhead."""
    from torch.profiler import ProfilerActivity, profile

    text = []
    for name, step in (("trident", trainer.train_step), ("bare", lambda: bare.train_step(dataset))):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        text.append(f"--- {name}: {steps} steps, ops by self CPU time ---\n"
                    + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))
    return "\n".join(text)


def overhead_ops(n: int, repeats: int = 20) -> dict:
    """CPU ms of the per-step, per-parameter passes trident's optimizer path makes (and cheaper
    equivalents) on flat fp32 buffers of n elements: what the profile attributes its overhead to."""
    g, w, m, v = torch.randn(n), torch.randn(n), torch.zeros(n), torch.zeros(n)
    mask = torch.rand(n) > 0.01
    cases = {
        "grad norm as zero.py: g.masked_select(mask).float().pow(2).sum()":
            lambda: g.masked_select(mask).float().pow(2).sum(),
        "  alternative: torch.dot(g * mask, g)": lambda: torch.dot(g * mask, g),
        "  alternative: torch.linalg.vector_norm(g) (unmasked range)": lambda: torch.linalg.vector_norm(g),
        "overflow check as precision.py: torch.isfinite(g).all()": lambda: torch.isfinite(g).all(),
        "decay as zero.py: w.mul_(torch.where(mask, 1 - lr*wd, 1.0))": lambda: w.mul_(torch.where(mask, 0.99, 1.0)),
        "Adam update as zero.py (lerp_, mul_/addcmul_, sqrt/div/add_, addcdiv_)": lambda: (
            m.lerp_(g, 0.1), v.mul_(0.95).addcmul_(g, g, value=0.05),
            w.addcdiv_(m, (v.sqrt() / 1.0).add_(1e-8), value=-1e-3)),
        "  alternative: torch._fused_adamw_ (one flat tensor)": lambda: torch._fused_adamw_(
            [w], [g], [m], [v], [], [torch.tensor(1.0)], lr=1e-3, beta1=0.9, beta2=0.95, weight_decay=0.1,
            eps=1e-8, amsgrad=False, maximize=False),
    }
    result = {}
    for name, fn in cases.items():
        fn()
        with Timer() as timer:
            for _ in range(repeats):
                fn()
        result[name] = timer.cpu / repeats * 1e3
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller model, fewer steps")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per loop (default 8, quick 4)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: CPU time then measures work, not waiting for cores)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--profile", action="store_true", help="also profile both loops (torch.profiler)")
    parser.add_argument("--ops", type=int, default=0, metavar="N",
                        help="only time trident's per-parameter optimizer passes on N-element buffers")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.ops:
        ops = overhead_ops(args.ops)
        print_table(f"Per-step passes over {args.ops:,} fp32 elements, {args.threads} thread(s)",
                    ["operation", "CPU ms"], [[name, ms] for name, ms in ops.items()])
        emit_json("train_overhead_ops", {"elements": args.ops, "cpu_ms": ops})
        return 0
    steps = args.steps or (4 if args.quick else 8)
    results = [measure(p, steps, args.warmup, args.quick, args.device, args.threads, args.profile)
               for p in args.precisions.split(",")]
    rows = []
    for r in results:
        for name in ("trident", "bare"):
            wall, cpu = r[name]["wall"], r[name]["cpu"]
            rows.append([r["precision"], name, f"{r['params']:,}", wall["step_s"], cpu["step_s"],
                         wall["tokens_per_s"], cpu["tokens_per_s"], f"{cpu['mfu']:.1%}", f"{wall['mfu']:.1%}",
                         f"{r['ratio_cpu']:.3f}" if name == "trident" else "",
                         f"{r['ratio_wall']:.3f}" if name == "trident" else ""])
    print_table(f"trident vs bare PyTorch loop ({steps} timed steps each, ABBA, {args.threads} thread(s); medians)",
                ["precision", "loop", "params", "wall s", "CPU s", "tok/s wall", "tok/CPU-s", "MFU (CPU)",
                 "MFU (wall)", "trident/bare (CPU)", "trident/bare (wall)"], rows)
    for r in results:
        print(f"{r['precision']}: per-pair median ratio CPU {r['ratio_cpu_pairs_median']:.3f}, wall "
              f"{r['ratio_wall_pairs_median']:.3f}; matmul peak {r['peak_tflops']['cpu'] * 1e3:.1f} GFLOP/CPU-s, "
              f"{r['peak_tflops']['wall'] * 1e3:.1f} GFLOP/s wall; load {r['load']}")
        if "profile" in r:
            print(r.pop("profile"))
    emit_json("train_overhead", {"steps": steps, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
