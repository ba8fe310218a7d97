"""Pipeline parallelism on this CPU: measured bubble of 1F1B and interleaved 1F1B for pp=4 and
m = 4, 8, 16 beside (p-1)/(m*v), and peak saved-activation memory per stage, GPipe vs 1F1B.

Bubble: 4 gloo processes (1 thread each) train the same 8-layer GPT (1F1B: 2 layers a stage;
interleaved: v=2 chunks of 1 layer). With `logging.record_timeline` the trainer times every
forward/backward box of a step on every stage from a shared origin and reports
Timeline.bubble_fraction ((stages x makespan - compute) / compute). Two steps are recorded after a
warm-up; the table gives their median beside theory (p-1)/(m*v) (which trident's simulator
reproduces exactly for equal box times), and the median and spread (coefficient of variation) of
the forward and backward box times of one step: boxes of equal work should take equal time.
Time-sharing: 4 processes on 2 cores (and other jobs on the machine). In 1F1B's steady state all 4
stages compute at once and each box is stretched ~2x while warm-up/cool-down boxes have fewer
stages competing (this lowers the measured bubble), and every transfer needs both peers scheduled
(this raises it). With other jobs on the machine box times vary several-fold; the spread column
says how far a run is from the equal box times the theory assumes.

Memory: the same model, m=8, GPipe vs 1F1B; every tensor autograd saves for backward is tracked
through torch.autograd.graph.saved_tensors_hooks (storage-level, refcounted, parameters excluded),
and each stage reports the peak of live saved bytes during a step, beside the schedule's peak
in-flight micro-batches (pipeline.schedules.peak_inflight).

Also writes docs/img/pipeline-measured-interleaved.png (a measured interleaved timeline, m=8).

    python benchmarks/pipeline.py [--quick] [--img-dir docs/img] [--pp 4] [--no-memory]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from common import RandomTokens, emit_json, load_average, make_config, median, print_table, run_ranks

MODEL = ["model.num_layers=8", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=128",
         "model.vocab_size=512", "train.micro_batch_size=2"]
QUICK_MODEL = ["model.num_layers=8", "model.hidden_size=128", "model.num_heads=4", "model.seq_length=64",
               "model.vocab_size=512", "train.micro_batch_size=2"]


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


def _bubble_worker(rank, world, overrides, out_dir, recorded):
    from trident.parallel.pipeline.timeline import Timeline
    from trident.train.trainer import Trainer

    config = make_config("demo", overrides + ["logging.record_timeline=false"])
    m = config.model
    trainer = Trainer(config, out_dir, datasets=(RandomTokens(m.seq_length, m.vocab_size), None),
                      vocab_size=m.vocab_size, log=lambda *a: None)
    trainer.train_step()  # warm-up (allocator, first-call costs), not recorded
    config.logging.record_timeline = True
    steps = []
    for _ in range(recorded):
        record = trainer.train_step()
        timeline = Timeline.load(Path(out_dir) / f"timeline_step{trainer.step}.json") if rank == 0 else None
        steps.append({"bubble": record["bubble"], "theory": record["bubble_theory"],
                      "step_s": record["step_time_s"], "timeline": timeline.to_json() if timeline else None})
    return steps


def _memory_worker(rank, world, overrides):
    from trident.parallel.pipeline.schedules import build_schedule, peak_inflight
    from trident.train.trainer import Trainer

    config = make_config("demo", overrides)
    m = config.model
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out, datasets=(RandomTokens(m.seq_length, m.vocab_size), None),
                          vocab_size=m.vocab_size, log=lambda *a: None)
        tracker = SavedActivations([trainer.model.buffers.params, trainer.model.buffers.grads])
        with torch.autograd.graph.saved_tensors_hooks(tracker.pack, tracker.unpack):
            trainer.train_step()
    micro = config.train.global_batch_size // config.train.micro_batch_size
    inflight = peak_inflight(build_schedule(config.parallel.schedule, config.parallel.pp, micro))[trainer.mesh.pp_rank]
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


def measure_bubbles(model: list[str], pp: int, micro_batches: list[int], recorded: int) -> tuple[list, dict]:
    rows, results, diagram = [], [], None
    for schedule in ("1f1b", "interleaved"):
        for m in micro_batches:
            with tempfile.TemporaryDirectory() as out:
                steps = run_ranks(_bubble_worker, pp, overrides_for(model, pp, schedule, m), out, recorded)[0]
            measured = median([s["bubble"] for s in steps])
            boxes = box_stats(steps[0]["timeline"])
            theory = steps[0]["theory"]
            entry = {"schedule": schedule, "m": m, "v": 2 if schedule == "interleaved" else 1,
                     "bubble_measured": measured, "bubble_steps": [s["bubble"] for s in steps],
                     "bubble_theory": theory, "boxes": boxes,
                     "rel_error_vs_theory": (measured - theory) / theory,
                     "step_s": median([s["step_s"] for s in steps]),
                     "load": load_average()}
            results.append(entry)
            rows.append([schedule, m, entry["v"], f"{measured:.3f}", f"{theory:.3f}",
                         f"{boxes['forward']['median_ms']:.1f} / {boxes['backward']['median_ms']:.1f}",
                         f"{boxes['forward']['cv']:.2f} / {boxes['backward']['cv']:.2f}",
                         f"{entry['rel_error_vs_theory']:+.0%}", entry["step_s"]])
            print(f"{schedule} m={m}: bubble {measured:.3f} (theory {theory:.3f}), load {entry['load']}", flush=True)
            if schedule == "interleaved" and m == 8:
                diagram = steps[0]["timeline"]
    print_table(f"Bubble fraction, pp={pp}, measured on {pp} gloo processes (median of {recorded} steps)",
                ["schedule", "m", "v", "measured", "theory (p-1)/(m v)", "fwd/bwd box ms", "box-time CV f/b",
                 "measured vs theory", "step s"], rows)
    return results, diagram


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
    parser.add_argument("--quick", action="store_true", help="smaller model, m in {4, 8}, one recorded step")
    parser.add_argument("--img-dir", default="docs/img", help="where the measured timeline PNG goes")
    parser.add_argument("--pp", type=int, default=4, help="pipeline stages (default 4)")
    parser.add_argument("--no-memory", action="store_true", help="skip the GPipe vs 1F1B memory part")
    args = parser.parse_args()
    model = QUICK_MODEL if args.quick else MODEL
    micro_batches, recorded = ([4, 8], 1) if args.quick else ([4, 8, 16], 2)
    bubbles, diagram = measure_bubbles(model, args.pp, micro_batches, recorded)
    memory = [] if args.no_memory else measure_memory(model, args.pp, 8)
    if diagram is not None:
        from trident.parallel.pipeline.draw import draw_timeline
        from trident.parallel.pipeline.timeline import Timeline

        name = "pipeline-measured-interleaved.png" if args.pp == 4 else f"pipeline-measured-interleaved-pp{args.pp}.png"
        path = draw_timeline(Timeline.from_json(diagram), Path(args.img_dir) / name,
                             f"interleaved 1F1B, measured on {args.pp} gloo processes (2 cores)")
        print(f"wrote {path}")
    emit_json("pipeline", {"pp": args.pp, "model": model, "bubbles": bubbles, "memory": memory})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
