"""What staying alive costs a training step: the per-step stop-flag agreement of preemption
(train/preemption.py: one MAX all-reduce of two int32 over the world), against the same step without it.

Two gloo ranks at dp 2, a rank pinned to each core, one thread each, the fp32 model of
benchmarks/train_overhead.py (4 GPT blocks x 256, seq 256, global batch 8). Both ranks run the same
sequence of steps in A B B A order (A: `train_step()` alone, B: `train_step()` then `agree()`), so load
drift hits both alike (in blocks of 4 steps, each variant in its steady state). The headline is the
agreement timed on its own, waiting included, over the median step (target <= 1% of a CPU step); the
A/B difference of median step times is printed beside it with the steps' spread (interquartile range
over the median), which on a shared 2-core machine is far larger than the cost itself.

    python benchmarks/resilience_overhead.py [--steps 24] [--quick]
"""
from __future__ import annotations

import argparse
import time

from common import RandomTokens, emit_json, load_average, make_config, median, print_table

MODEL = ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
         "model.vocab_size=4096", "train.global_batch_size=8", "train.micro_batch_size=4"]
QUICK = ["model.num_layers=2", "model.hidden_size=128", "model.seq_length=128"]


def _rank(rank, world, steps, quick):
    from trident.train.preemption import StopRequests
    from trident.train.trainer import Trainer

    config = make_config("demo", MODEL + (QUICK if quick else []) + [
        "parallel.dp=2", "train.steps=1000000", "train.rampup_batch_size=null", "train.peak_tflops=1"])
    trainer = Trainer(config, "/tmp/trident-resilience-bench", datasets=(RandomTokens(config.model.seq_length, 4096), None),
                      vocab_size=4096, log=lambda *a: None)
    stops = StopRequests(None, trainer.device, config.checkpoint.save_interval_minutes, log=lambda *a: None)
    for _ in range(2):  # warm-up
        trainer.train_step()
    times = {"without": [], "with": [], "agree": []}
    for i in range(steps):
        flagged = (i // 4) % 4 in (1, 2)  # blocks of 4 steps in A B B A order: each variant in its steady state
        start = time.perf_counter()
        trainer.train_step()
        middle = time.perf_counter()
        if flagged:
            stops.agree()
        end = time.perf_counter()
        times["with" if flagged else "without"].append(end - start)
        if flagged:
            times["agree"].append(end - middle)
    return {key: median(values) for key, values in times.items()} | {"spread": _spread(times["without"])}


def _spread(values: list[float]) -> float:
    ordered = sorted(values)
    return (ordered[3 * len(ordered) // 4] - ordered[len(ordered) // 4]) / median(ordered)


def main() -> None:
    from common import run_ranks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--quick", action="store_true", help="a smaller model (CI-sized)")
    args = parser.parse_args()
    before = load_average()
    results = run_ranks(_rank, 2, args.steps, args.quick, pin_cores=True)
    step, flagged, agree = (max(r[key] for r in results) for key in ("without", "with", "agree"))
    overhead, spread = flagged / step - 1, max(r["spread"] for r in results)
    print_table("Preemption flag: per-step cost (median over steps, slowest rank)",
                ["step (s)", "agree() (ms)", "agree / step", "target", "A/B step difference", "step spread (IQR)"],
                [[step, agree * 1e3, f"{agree / step:.3%}", "<= 1%", f"{overhead:+.2%}", f"{spread:.1%}"]])
    emit_json("resilience_overhead", {"step_s": step, "step_with_flag_s": flagged, "agree_s": agree,
                                      "ab_difference": overhead, "step_spread": spread, "agree_fraction": agree / step,
                                      "load_before": before})


if __name__ == "__main__":
    main()
