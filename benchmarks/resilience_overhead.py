"""What keeping a large run alive and understood costs a training step, with default intervals:
the preemption flag agreement (one MAX all-reduce of two int32 every step), the flight recorder (every
instruction and collective begun and ended in a ring buffer), the DP replica digest check (every
`diagnostics.weight_check_interval` steps) and the straggler exchange (every
`diagnostics.straggler_interval` steps: the step's timeline recorded, reports gathered on rank 0,
the simulator replay).

Two gloo ranks, a rank pinned to each core, one thread each, the fp32 model of
benchmarks/train_overhead.py (4 GPT blocks x 256, seq 256, global batch 8), in two layouts: dp 2 and
pp 2. Each cost is timed on its own, waiting included, and set against the median step: the flag per
step; the recorder as events per step x the cost of one event (measured in the same process); the
digest check and the straggler step's extra time divided by their intervals. Beside them, the A/B
difference of median step times with everything off (blocks of 4 steps, A B B A) and the steps'
spread, which on a shared 2-core machine is far larger than the costs. Target: the sum <= 1%.

    python benchmarks/resilience_overhead.py [--steps 32] [--quick]
"""
from __future__ import annotations

import argparse
import time

from common import RandomTokens, emit_json, load_average, make_config, median, print_table

MODEL = ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
         "model.vocab_size=4096", "train.global_batch_size=8", "train.micro_batch_size=4"]
QUICK = ["model.num_layers=2", "model.hidden_size=128", "model.seq_length=128"]
LAYOUTS = {"dp2": ["parallel.dp=2"], "pp2": ["parallel.pp=2", "train.micro_batch_size=2"]}


def _event_cost() -> float:
    from trident.parallel.flight import FlightRecorder

    recorder, n = FlightRecorder(), 100_000
    start = time.perf_counter()
    for _ in range(n):
        recorder.end(recorder.begin("all_reduce", "dp group", 1, 0, 0))
    return (time.perf_counter() - start) / n


def _timed(fn, repeats: int = 1) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return median(times)


def _rank(rank, world, layout, steps, quick):
    from trident.parallel.flight import FLIGHT
    from trident.train.preemption import StopRequests
    from trident.train.trainer import Trainer

    config = make_config("demo", MODEL + (QUICK if quick else []) + LAYOUTS[layout] + [
        "train.steps=1000000", "train.rampup_batch_size=null", "train.peak_tflops=1"])
    trainer = Trainer(config, "/tmp/trident-resilience-bench", datasets=(RandomTokens(config.model.seq_length, 4096), None),
                      vocab_size=4096, log=lambda *a: None)
    diag, stops = trainer.diagnostics, StopRequests(30.0, log=lambda *a: None)
    interval = dict(straggler=diag.cfg.straggler_interval, digests=diag.cfg.weight_check_interval)
    diag.cfg.straggler_interval = 0
    for _ in range(2):
        trainer.train_step()
    times = {"off": [], "on": [], "agree": [], "events": []}
    for i in range(steps):
        on = (i // 4) % 4 in (1, 2)  # blocks of 4 steps in A B B A order
        FLIGHT.enabled, seq = on, FLIGHT.seq
        start = time.perf_counter()
        trainer.train_step()
        if on:
            times["agree"].append(_timed(lambda: stops.agree(trainer.device)))
            times["events"].append(FLIGHT.seq - seq)
        times["on" if on else "off"].append(time.perf_counter() - start)
    FLIGHT.enabled = True
    digests = _timed(lambda: diag.check_replicas(trainer.step), repeats=5)
    plain = _timed(lambda: diag.after_step(trainer.step, trainer.train_step(), 2), repeats=3)
    diag.cfg.straggler_interval = 1
    straggling = _timed(lambda: diag.after_step(trainer.step, trainer.train_step(), 2), repeats=3)
    return {"step": median(times["off"]), "step_on": median(times["on"]), "agree": median(times["agree"]),
            "events": median(times["events"]), "event_cost": _event_cost(), "digests": digests,
            "straggler_extra": max(0.0, straggling - plain), "intervals": interval,
            "spread": _spread(times["off"])}


def _spread(values: list[float]) -> float:
    ordered = sorted(values)
    return (ordered[3 * len(ordered) // 4] - ordered[len(ordered) // 4]) / median(ordered)


def _row(layout: str, results: list[dict]) -> tuple[list, dict]:
    slowest = lambda key: max(r[key] for r in results)  # noqa: E731
    step, interval = slowest("step"), results[0]["intervals"]
    parts = {"flag": slowest("agree"), "recorder": slowest("events") * slowest("event_cost"),
             "digests": slowest("digests") / interval["digests"], "stragglers": slowest("straggler_extra") / interval["straggler"]}
    total = sum(parts.values())
    ab = slowest("step_on") / step - 1
    row = [layout, step, *[f"{v / step:.3%}" for v in parts.values()], f"{total / step:.3%}", "<= 1%",
           f"{ab:+.2%}", f"{slowest('spread'):.1%}"]
    return row, {"layout": layout, "step_s": step, **{f"{k}_fraction": v / step for k, v in parts.items()},
                 "total_fraction": total / step, "events_per_step": slowest("events"), "ab_difference": ab}


def main() -> None:
    from common import run_ranks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="a smaller model (CI-sized)")
    args = parser.parse_args()
    before, rows, payload = load_average(), [], []
    for layout in LAYOUTS:
        row, data = _row(layout, run_ranks(_rank, 2, layout, args.steps, args.quick, pin_cores=True))
        rows.append(row)
        payload.append(data)
    print_table("Resilience and diagnosis: cost per step (fractions of the median step, slowest rank)",
                ["layout", "step (s)", "stop flag", "flight recorder", "digests / interval", "stragglers / interval",
                 "total", "target", "A/B step difference", "step spread (IQR)"], rows)
    emit_json("resilience_overhead", {"layouts": payload, "load_before": before})


if __name__ == "__main__":
    main()
