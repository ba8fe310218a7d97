"""Pipeline parallelism on this CPU: trident's 1F1B against interleaved 1F1B at pp = 2 (one core
a stage), m = 4 and 8, with overlapped and batched pipeline messages; the measured bubble of each
beside (p-1)/(m v); and peak saved-activation memory per stage, GPipe vs 1F1B.

Speed and bubble: 2 gloo processes (1 thread each, each pinned to a core of its own unless
--no-pin) train a GPT of 8 layers x 256 (--layers 4: the issue's), 8 heads, seq 256, vocab 128,
micro-batch 4, fp32 (1F1B: 4 layers a stage, interleaved: v = 2 chunks of 2 layers). Every layout (schedule x m x contract) lives in the same two processes as its own
Trainer, and the rounds interleave them (one recorded step of each layout per round), so load from
other jobs hits all of them alike; the table gives medians over the rounds. With
`logging.record_timeline` the trainer times every compute box, every transfer (post to completion)
and every wait on every stage from a shared origin; the bubble is Timeline.bubble_fraction =
(stages x makespan - compute) / compute with waiting counted as idle: on an idle machine with a core
a stage it is exactly what (p-1)/(m v) predicts. Speed-ups are ratios of median step times
(whole train step, and the pipeline part alone: the timeline's makespan) against 1F1B with
overlapped messages at the same m.

Whether the machine allows that measurement is printed beside it: "core share" is the CPU time
each stage's process got per wall second it was not idle (~1 with a core a stage; less when the
stages time-share cores, e.g. with other jobs in other cgroups; then an idle stage lends its CPU
to the busy one and the wall-clock bubble stops measuring the schedule). "Replayed" figures feed
the thread CPU cost of every measured box into trident's simulator of the same plan (free
messages): the step as it would run with a core a stage, with this model's real stage imbalance.

Memory: the same model, m=8, GPipe vs 1F1B; every tensor autograd saves for backward is tracked
through torch.autograd.graph.saved_tensors_hooks (storage-level, refcounted, parameters excluded),
and each stage reports the peak of live saved bytes during a step, beside the schedule's peak
in-flight micro-batches (pipeline.schedules.peak_inflight).

Also writes docs/img/pipeline-measured-pp2-m4-{1f1b,interleaved}.png: the measured step (median
makespan) of each schedule with overlapped messages: transfers in flight drawn under and over the
compute boxes.

    python benchmarks/pipeline.py [--quick] [--rounds N] [--img-dir docs/img] [--no-memory] [--layers 8] [--no-pin]
                                  [--schedules 1f1b,interleaved,zb-h1,zb-h2]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from common import RandomTokens, emit_json, load_average, make_config, median, print_table, run_ranks

# A small vocabulary keeps the output head and loss (on the last stage only) at ~3% of a layer, so
# the stages do nearly equal work, as (p-1)/(m v) assumes; 8 layers (the default, --layers) halve
# that share of a stage again against the 4.
def model_overrides(layers: int) -> list[str]:
    return [f"model.num_layers={layers}", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
            "model.vocab_size=128", "train.micro_batch_size=4"]


QUICK_MODEL = ["model.num_layers=4", "model.hidden_size=128", "model.num_heads=4", "model.seq_length=64",
               "model.vocab_size=512", "train.micro_batch_size=2"]
PP = 2


def layout_keys(schedules: list[str]) -> list[tuple[str, int, str]]:
    """(schedule, m, contract) to measure; 1F1B overlapped first at each m (the baseline)."""
    return [(schedule, m, contract) for m in (4, 8) for contract in ("overlapped", "batched")
            for schedule in schedules]


def overrides_for(model: list[str], pp: int, schedule: str, m: int) -> list[str]:
    v = 2 if schedule == "interleaved" else 1
    micro = int(next(o for o in model if o.startswith("train.micro_batch_size=")).split("=")[1])
    return model + [f"parallel.pp={pp}", f"parallel.schedule={schedule}", f"parallel.virtual_stages={v}",
                    f"train.global_batch_size={m * micro}", "train.rampup_batch_size=null",
                    "train.eval_interval=0", "train.steps=1000000", "train.device=cpu"]


class SavedActivations:
    """Live bytes of tensors saved for backward (unique storages, refcounted), and their peak."""

    def __init__(self, excluded: list[torch.Tensor]):
        self.excluded = {t.untyped_storage().data_ptr() for t in excluded}
        self.live: dict[int, list[int]] = {}  # storage ptr -> [references, bytes]
        self.bytes = self.peak = 0

    def pack(self, tensor: torch.Tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.excluded or tensor.device.type == "meta":
            return tensor
        entry = self.live.setdefault(key, [0, storage.nbytes()])
        if entry[0] == 0:
            self.bytes += entry[1]
            self.peak = max(self.peak, self.bytes)
        entry[0] += 1
        return _Held(self, key, tensor)

    def unpack(self, held):
        return held.tensor if isinstance(held, _Held) else held

    def release(self, key: int) -> None:
        entry = self.live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.bytes -= entry[1]
            del self.live[key]


class _Held:
    """What autograd keeps instead of the tensor; freed with the graph node that saved it."""

    def __init__(self, tracker: SavedActivations, key: int, tensor: torch.Tensor):
        self.tracker, self.key, self.tensor = tracker, key, tensor

    def __del__(self):
        self.tracker.release(self.key)


def _layouts_worker(rank, world, model, rounds, out_dir, schedules):
    """Every layout as its own Trainer in these processes; `rounds` recorded steps of each, interleaved."""
    from trident.parallel.pipeline.timeline import Timeline
    from trident.train.allocator import keep_freed_memory
    from trident.train.trainer import Trainer

    keep_freed_memory()  # before any model, as `trident train` does (the trainers would apply it later)
    trainers = {}
    for schedule, m, contract in layout_keys(schedules):
        config = make_config("demo", overrides_for(model, PP, schedule, m) + ["logging.record_timeline=true"])
        trainer = Trainer(config, f"{out_dir}/{schedule}-{m}-{contract}", vocab_size=config.model.vocab_size,
                          datasets=(RandomTokens(config.model.seq_length, config.model.vocab_size), None),
                          log=lambda *a: None)
        trainer.model.executor.set_contract(contract)
        trainer.costs = cpu_cost_of_each_box(trainer.model.executor, rank)
        trainer.train_step()  # warm-up (allocator, first-call costs), not counted
        trainers[(schedule, m, contract)] = trainer
    steps = {key: [] for key in trainers}
    for _ in range(rounds):
        for key, trainer in trainers.items():
            trainer.costs.clear()
            cpu = time.process_time()
            record = trainer.train_step()
            cpu = time.process_time() - cpu
            timeline = Timeline.load(trainer.out / f"timeline_step{trainer.step}.json") if rank == 0 else None
            steps[key].append({"step_s": record["step_time_s"], "cpu_s": cpu, "costs": dict(trainer.costs),
                               "bubble": record["bubble"],
                               "theory": record["bubble_theory"], "load": load_average()["load_1m"],
                               "timeline": timeline.to_json() if timeline else None})
    return steps


def cpu_cost_of_each_box(executor, stage: int) -> dict:
    """Times the thread CPU seconds of every Forward/Backward the executor runs into the returned
    dict, keyed as simulate's `durations`: what each box costs on a core of its own, whatever the
    time-sharing around it."""
    from trident.parallel.pipeline.schedules import COMPUTE_KIND

    costs: dict = {}
    run_compute = executor.compute

    def compute(op):
        start = time.thread_time()
        run_compute(op)
        costs[(stage, COMPUTE_KIND[type(op)], op.microbatch, op.chunk)] = time.thread_time() - start

    executor.compute = compute
    return costs


def replay(key, per_rank_step: list[dict]):
    """The step as it would run with a core a stage: each box's measured CPU cost through the
    simulator's model of the same plan (free messages)."""
    from trident.parallel.pipeline.overlap import schedule_for
    from trident.parallel.pipeline.simulate import simulate

    schedule, m, contract = key
    costs = {k: v for step in per_rank_step for k, v in step["costs"].items()}
    return simulate(schedule_for(schedule, PP, m, 2 if schedule == "interleaved" else 1, contract),
                    durations=costs, contract=contract)


def core_share(timeline, rank_steps: list[dict]) -> float:
    """CPU seconds each stage's process got per wall second it was not idle in the pipeline (mean
    over stages): ~1 when every stage has a core of its own, as the bubble measurement needs; below
    1 when the stages time-share cores with each other or with other jobs (then an idle stage lends
    its CPU to the busy one and the wall-clock bubble no longer measures the schedule)."""
    shares = []
    for stage, step in enumerate(rank_steps):
        busy = step["step_s"] - (timeline.makespan - timeline.compute_time(stage))
        shares.append(step["cpu_s"] / busy)
    return sum(shares) / len(shares)


def summarise(key, ranks: list[dict]) -> dict:
    """Medians of one layout's recorded steps, its replay on a core a stage, and its speed-ups over
    1F1B with overlapped messages at the same m. ranks[r][layout] lists rank r's steps."""
    from trident.parallel.pipeline.timeline import Timeline

    schedule, m, contract = key
    base_key = ("1f1b", m, "overlapped")
    steps, baseline = ranks[0][key], ranks[0][base_key]
    timelines = [Timeline.from_json(s["timeline"]) for s in steps]
    makespans = [t.makespan for t in timelines]
    shares = [core_share(t, [r[key][i] for r in ranks]) for i, t in enumerate(timelines)]
    replays = [replay(key, [r[key][i] for r in ranks]) for i in range(len(steps))]
    base_replay = median([replay(base_key, [r[base_key][i] for r in ranks]).makespan for i in range(len(baseline))])
    waits = [sum(t.wait_time(s) for s in range(t.num_stages)) / t.num_stages / t.makespan for t in timelines]
    base_span = median([Timeline.from_json(s["timeline"]).makespan for s in baseline])
    typical = sorted(range(len(steps)), key=lambda i: makespans[i])[len(steps) // 2]
    return {"schedule": schedule, "m": m, "v": 2 if schedule == "interleaved" else 1, "contract": contract,
            "bubble_measured": median([s["bubble"] for s in steps]), "bubble_steps": [s["bubble"] for s in steps],
            "bubble_theory": steps[0]["theory"], "step_s": median([s["step_s"] for s in steps]),
            "pipeline_s": median(makespans), "wait_fraction": median(waits), "core_share": median(shares),
            "bubble_replayed": median([r.bubble_fraction for r in replays]),
            "speedup_step": median([s["step_s"] for s in baseline]) / median([s["step_s"] for s in steps]),
            "speedup_pipeline": base_span / median(makespans),
            "speedup_replayed": base_replay / median([r.makespan for r in replays]),
            "boxes": box_stats(steps[typical]["timeline"]),
            "load_1m": [s["load"] for s in steps], "typical_timeline": steps[typical]["timeline"]}


def measure_layouts(model: list[str], rounds: int, pin_cores: bool, schedules: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        ranks = run_ranks(_layouts_worker, PP, model, rounds, out, schedules, pin_cores=pin_cores)
    results, rows = [], []
    for key in ranks[0]:
        schedule, m, contract = key
        entry = summarise(key, ranks)
        results.append(entry)
        theory = entry["bubble_theory"]
        rows.append([schedule, m, entry["v"], contract, f"{entry['bubble_measured']:.3f}", f"{theory:.3f}",
                     f"{(entry['bubble_measured'] - theory) / theory:+.0%}", f"{entry['wait_fraction']:.3f}",
                     f"{entry['boxes']['forward']['median_ms']:.1f} / {entry['boxes']['backward']['median_ms']:.1f}",
                     f"{entry['core_share']:.2f}", f"{entry['step_s']:.3f}", f"{entry['speedup_step']:.3f}",
                     f"{entry['speedup_pipeline']:.3f}", f"{entry['bubble_replayed']:.3f}",
                     f"{entry['speedup_replayed']:.3f}"])
    loads = [x for entry in results for x in entry["load_1m"]]
    print_table(f"pp={PP}, 2 gloo processes{' pinned to a core each' if pin_cores else ''}, median of {rounds} "
                f"interleaved rounds (load 1m {min(loads)}-{max(loads)})",
                ["schedule", "m", "v", "messages", "bubble", "theory (p-1)/(m v)", "vs theory", "waiting / step",
                 "fwd/bwd box ms", "core share", "step s", "speed-up vs 1F1B overlapped (step)", "(pipeline part)",
                 "replayed bubble", "replayed speed-up"], rows)
    return results


def _memory_worker(rank, world, overrides):
    from trident.parallel.pipeline.overlap import schedule_for
    from trident.parallel.pipeline.schedules import peak_inflight
    from trident.train.trainer import Trainer

    config = make_config("demo", overrides)
    m = config.model
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out, datasets=(RandomTokens(m.seq_length, m.vocab_size), None),
                          vocab_size=m.vocab_size, log=lambda *a: None)
        tracker = SavedActivations([trainer.model.param_buffers.params, trainer.model.grad_buffers.grads])
        with torch.autograd.graph.saved_tensors_hooks(tracker.pack, tracker.unpack):
            trainer.train_step()
    micro = config.train.global_batch_size // config.train.micro_batch_size
    schedule = schedule_for(config.parallel.schedule, config.parallel.pp, micro, 1, trainer.model.executor.contract)
    inflight = peak_inflight(schedule)[trainer.mesh.pp_rank]
    return {"stage": trainer.mesh.pp_rank, "peak_saved_bytes": tracker.peak, "left_after_step": tracker.bytes,
            "peak_inflight": inflight}


def box_stats(timeline_json: dict) -> dict:
    """Median forward / backward box time (ms) and their spread (coefficient of variation): boxes of
    equal work should take equal time; a large spread is CPU contention, which the bubble absorbs."""
    stats = {}
    for kind in ("forward", "backward"):
        times = [b["end"] - b["start"] for b in timeline_json["boxes"] if b["kind"] == kind]
        mean = sum(times) / len(times)
        spread = (sum((t - mean) ** 2 for t in times) / len(times)) ** 0.5 / mean
        stats[kind] = {"median_ms": median(times) * 1e3, "cv": spread}
    return stats


def measure_memory(model: list[str], pp: int, m: int) -> list:
    rows, results = [], []
    for schedule in ("gpipe", "1f1b"):
        stages = run_ranks(_memory_worker, pp, overrides_for(model, pp, schedule, m))
        results.append({"schedule": schedule, "m": m, "stages": stages})
    gpipe, ofob = results[0]["stages"], results[1]["stages"]
    for g, o in zip(gpipe, ofob):
        rows.append([g["stage"], f"{g['peak_saved_bytes'] / 2**20:.1f}", g["peak_inflight"],
                     f"{o['peak_saved_bytes'] / 2**20:.1f}", o["peak_inflight"],
                     f"{o['peak_saved_bytes'] / g['peak_saved_bytes']:.2f}",
                     f"{o['peak_inflight'] / g['peak_inflight']:.2f}"])
    print_table(f"Peak saved activations per stage (MiB), pp={pp}, m={m}",
                ["stage", "GPipe MiB", "GPipe in-flight", "1F1B MiB", "1F1B in-flight", "1F1B/GPipe bytes",
                 "1F1B/GPipe in-flight"], rows)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller model, 2 rounds, no memory part")
    parser.add_argument("--rounds", type=int, default=7, help="recorded steps of each layout (default 7)")
    parser.add_argument("--img-dir", default="docs/img", help="where the measured timeline PNGs go")
    parser.add_argument("--no-memory", action="store_true", help="skip the GPipe vs 1F1B memory part")
    parser.add_argument("--layers", type=int, default=8, help="transformer layers (default 8; the issue's model: 4)")
    parser.add_argument("--no-pin", action="store_true", help="let the kernel place the two ranks (default: a core each)")
    parser.add_argument("--schedules", default="1f1b,interleaved",
                        help="comma-separated, of 1f1b, interleaved, zb-h1, zb-h2; 1f1b is the baseline")
    args = parser.parse_args()
    model = QUICK_MODEL if args.quick else model_overrides(args.layers)
    schedules = ["1f1b"] + [name for name in args.schedules.split(",") if name != "1f1b"]
    layouts = measure_layouts(model, 2 if args.quick else args.rounds, pin_cores=not args.no_pin, schedules=schedules)
    memory = [] if args.no_memory or args.quick else measure_memory(model, PP, 8)
    from trident.parallel.pipeline.draw import draw_timeline
    from trident.parallel.pipeline.timeline import Timeline

    for entry in layouts:
        if entry["m"] == 4 and entry["contract"] == "overlapped":
            name = f"pipeline-measured-pp2-m4-{entry['schedule']}.png"
            path = draw_timeline(Timeline.from_json(entry["typical_timeline"]), Path(args.img_dir) / name,
                                 f"{entry['schedule']}, overlapped messages, measured on 2 gloo processes")
            print(f"wrote {path}")
    for entry in layouts:
        entry.pop("typical_timeline")
    emit_json("pipeline", {"pp": PP, "model": model, "layouts": layouts, "memory": memory})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
