"""trident's training step against a minimal hand-written PyTorch loop, same model and batch, same run.

Both loops train the GPT of trident.model.gpt.build_model (same seeded weights) on the same batch:
- trident: `Trainer.train_step()` (flat fp32 grad buffers, its AdamW, clipping, LR schedule, metrics);
- bare: `model(tokens, labels).mean().backward()` per micro-batch, `clip_grad_norm_`, `torch.optim.AdamW`
  (PyTorch's default foreach implementation); bf16 the standard AMP recipe (fp32 weights + autocast).
Steps alternate in A B B A order so machine-load drift hits both alike; the figures are medians over
the timed steps (after warm-up), and the ratio is median(bare time) / median(trident time),
i.e. trident tokens/s over bare tokens/s (target >= 0.95). MFU is against the matmul peak measured
in the same run (common.matmul_peak_tflops: a 1024^3 matmul for 1 s, or the known GPU peak).

    python benchmarks/train_overhead.py [--quick] [--steps N] [--precisions fp32,bf16] [--profile]

--profile prints where trident's step spends its time beyond the bare loop (cProfile, top functions).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time

import torch

from common import RandomTokens, emit_json, load_average, make_config, matmul_peak_tflops, median, print_table

# Sized so matmuls dominate a step but a step stays ~1-3 s on 2 loaded cores (fp32); bf16 on a CPU
# without native bf16 matmul (AVX2) is ~30x slower, so it runs a smaller model.
MODELS = {
    "fp32": ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
             "model.vocab_size=4096", "train.global_batch_size=8", "train.micro_batch_size=4"],
    "bf16": ["model.num_layers=2", "model.hidden_size=128", "model.num_heads=4", "model.seq_length=128",
             "model.vocab_size=2048", "train.global_batch_size=4", "train.micro_batch_size=2"],
}
QUICK = ["model.num_layers=2", "train.global_batch_size=4", "train.micro_batch_size=2"]


def config_for(precision: str, quick: bool, device: str):
    overrides = MODELS[precision] + (QUICK if quick else []) + [
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
            rows = torch.from_numpy(
                __import__("numpy").stack([dataset[start + offset + i] for i in range(micro)])).to(self.device)
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


def measure(precision: str, steps: int, warmup: int, quick: bool, device: str, profile: bool) -> dict:
    from trident.train.metrics import model_flops
    from trident.train.trainer import Trainer

    config = config_for(precision, quick, device)
    m = config.model
    dataset = RandomTokens(m.seq_length, m.vocab_size, n=4096)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out, datasets=(dataset, None), vocab_size=m.vocab_size, log=lambda *a: None)
        bare = BareLoop(config, trainer.device)
        times = {"trident": [], "bare": []}
        losses = {"trident": [], "bare": []}
        for index in range(warmup + steps):
            for name in (("trident", "bare") if index % 2 == 0 else ("bare", "trident")):  # ABBA order
                began = time.perf_counter()
                loss = trainer.train_step()["loss"] if name == "trident" else bare.train_step(dataset)
                if index >= warmup:
                    times[name].append(time.perf_counter() - began)
                losses[name].append(loss)
        peak = matmul_peak_tflops(torch.float32 if precision == "fp32" else torch.bfloat16, device)
        profile_text = profile_step(trainer) if profile else None
    flops = model_flops(config.train.global_batch_size, m.seq_length, m.num_layers, m.hidden_size,
                        m.padded_vocab_size())
    tokens = config.train.global_batch_size * m.seq_length
    result = {"precision": precision, "params": sum(p.numel() for _, p in trainer.named_params),
              "tokens_per_step": tokens, "flops_per_step": flops, "peak_tflops": peak,
              "first_losses": {k: [round(x, 5) for x in v[:3]] for k, v in losses.items()}}
    for name in ("trident", "bare"):
        step = median(times[name])
        result[name] = {"step_s": step, "tokens_per_s": tokens / step,
                        "mfu": flops / step / 1e12 / peak if peak else 0.0, "steps": times[name]}
    result["ratio"] = result["bare"]["step_s"] / result["trident"]["step_s"]
    # Per-pair ratios cancel drift that spans a pair; their median is a second, robust estimate.
    result["ratio_pairs_median"] = median([b / t for t, b in zip(times["trident"], times["bare"])])
    result["load"] = load_average()
    if profile_text:
        result["profile"] = profile_text
    return result


def profile_step(trainer, steps: int = 3, top: int = 25) -> str:
    """cProfile of a few trident steps, sorted by own time: where the non-matmul time goes."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        trainer.train_step()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller model, fewer steps")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per loop (default 8, quick 4)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--profile", action="store_true", help="also cProfile trident steps")
    args = parser.parse_args()
    steps = args.steps or (4 if args.quick else 8)
    results = [measure(p, steps, args.warmup, args.quick, args.device, args.profile)
               for p in args.precisions.split(",")]
    rows = []
    for r in results:
        for name in ("trident", "bare"):
            rows.append([r["precision"], name, f"{r['params']:,}", r[name]["step_s"], r[name]["tokens_per_s"],
                         f"{r[name]['mfu']:.1%}", f"{r['ratio']:.3f}" if name == "trident" else ""])
    print_table(f"trident vs bare PyTorch loop ({steps} timed steps each, alternating; median)",
                ["precision", "loop", "params", "step s", "tokens/s", "MFU", "trident/bare"], rows)
    for r in results:
        print(f"{r['precision']}: ratio (median of per-pair ratios) {r['ratio_pairs_median']:.3f}; "
              f"peak {r['peak_tflops'] * 1e3:.1f} GFLOP/s; load {r['load']}")
        if "profile" in r:
            print(r.pop("profile"))
    emit_json("train_overhead", {"steps": steps, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
