"""Checkpoint speed: trident's writer/reader against plain safetensors, and the training stall of a
save with `checkpoint.async_save` on vs off.

1. Throughput, same tensors (the fp32 weights of a GPT built by trident.model.gpt.build_model from
   the gpt-125m preset, on CPU; ~500 MB): MB/s of
   - trident save: save_checkpoint (CPU snapshot, safetensors + manifest with file digests into a
     temporary folder, fsync, rename, COMPLETE, `latest`) against plain `safetensors.torch.save_file`
     of the same dict, without and with an fsync of the file (trident's save is durable);
   - trident load: CheckpointReader (every file's digest verified first; and with verify="loaded",
     as resume/eval/export read: each tile checked as it is read) + reader.fill(weight pieces) into the
     model, against `load_file` + copy into the same parameters. Loads read what was just written
     (page cache). One torch thread (the machine is shared).
   Methods alternate (forward, then reversed order, each round); medians of wall time.
2. Stall: two Trainers (gpt-125m preset, fp32, micro-batch 1, short sequences so a step is short
   on a CPU; checkpoint = weights + Adam state, ~1.5 GB), one with checkpoint.async_save=false and
   one with true, alternating each round: a step (baseline), `trainer.save()` (the stall the loop
   sees), the next step (it overlaps the background write) and `writer.wait()` (what was left).
   Baseline step = median of every step with no save in flight (both trainers). Effective stall:
   sync = save() + wait(); async = save() + (next step - baseline step) + wait(). The training
   thread's own CPU time of the steps (time.thread_time) tells computing from waiting.
3. Size: checkpoint bytes per parameter of a bf16 and an fp32 Trainer (tensor files only, one
   process, after one step). Run it with PYTHONPATH pointing at an older trident for "before".
4. Host memory of an async save (bf16 Trainer): peak resident memory above the level before
   `trainer.save()` until `writer.wait()` returns (sampled every millisecond), over the bytes of
   tensors written; baseline in the same process: the format-1 writer's way, fp32 host copies then
   safetensors `save_file`, of the same state. Each measurement runs in a forked copy of the process.

    python benchmarks/checkpoint.py [--quick] [--rounds N] [--preset gpt-125m] [--dir DIR]
                                    [--sections throughput,stall,size,memory]
--dir chooses the disk written to (default: a temporary folder).
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from common import RandomTokens, Timer, emit_json, load_average, make_config, median, print_table
from trident.checkpoint.reader import CheckpointReader, complete_checkpoints, resolve_checkpoint
from trident.checkpoint.writer import save_checkpoint
from trident.parallel.state import weight_pieces
from trident.model.gpt import build_model, count_parameters
from trident.parallel.mesh import build_mesh

STALL_MODEL = ["model.seq_length=32", "train.global_batch_size=1", "train.micro_batch_size=1",
               "train.rampup_batch_size=null", "train.precision=fp32", "train.eval_interval=0",
               "train.steps=1000000", "train.device=cpu", "train.threads=1", "checkpoint.keep_last=1"]


def alternate(methods: dict, rounds: int) -> dict[str, list[Timer]]:
    """Run every method once a round, the order reversed every other round (drift hits all alike)."""
    times: dict[str, list[Timer]] = {name: [] for name in methods}
    names = list(methods)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            with Timer() as timer:
                methods[name]()
            times[name].append(timer)
    return times


def throughput(preset: str, quick: bool, rounds: int, work: Path) -> tuple[list[list], dict]:
    config = make_config(preset, ["model.num_layers=4"] if quick else [])
    model = build_model(config.model, config.model.padded_vocab_size(), config.train.seed)
    named = list(model.named_parameters())
    megabytes = sum(p.numel() * p.element_size() for _, p in named) / 1e6
    mesh = build_mesh(1, 1, 1)
    plain_file = work / "plain.safetensors"
    step = [0]

    def trident_save():
        step[0] += 1
        save_checkpoint(work / "trident", step[0], weight_pieces(named), {"step": step[0]}, mesh, keep_last=1)

    def plain_save(fsync: bool):
        save_file({name: p.detach() for name, p in named}, plain_file)
        if fsync:
            with open(plain_file, "rb") as handle:
                os.fsync(handle.fileno())

    def trident_load(verify: str):
        reader = CheckpointReader(resolve_checkpoint("auto", work / "trident"), verify=verify)
        reader.fill(weight_pieces(named))

    @torch.no_grad()
    def plain_load():
        state = load_file(plain_file)
        for name, param in named:
            param.copy_(state[name])

    saves = alternate({"trident save_checkpoint": trident_save,
                       "safetensors save_file": lambda: plain_save(False),
                       "safetensors save_file + fsync": lambda: plain_save(True)}, rounds)
    loads = alternate({"trident CheckpointReader + fill": lambda: trident_load("all"),
                       "trident, verify=loaded (resume, eval)": lambda: trident_load("loaded"),
                       "safetensors load_file + copy": plain_load}, rounds)
    rows, result = [], {"megabytes": megabytes, "parameters": count_parameters(model)}
    baselines = {"save": ("safetensors save_file", "safetensors save_file + fsync"),
                 "load": ("safetensors load_file + copy", None)}
    for kind, times in (("save", saves), ("load", loads)):
        base = [median(t.wall for t in times[b]) if b else None for b in baselines[kind]]
        for name, timers in times.items():
            wall = median(t.wall for t in timers)
            rows.append([kind, name, megabytes / wall, wall, median(t.cpu for t in timers)] +
                        [b / wall if b else "" for b in base])
            result[name] = {"mb_per_s": megabytes / wall, "wall_s": [t.wall for t in timers]}
    mb = {name: result[name]["mb_per_s"] for name in (*saves, *loads)}
    result["save_vs_plain"] = mb["trident save_checkpoint"] / mb["safetensors save_file"]
    result["save_vs_plain_fsync"] = mb["trident save_checkpoint"] / mb["safetensors save_file + fsync"]
    result["load_vs_plain"] = (mb["trident CheckpointReader + fill"] /
                               mb["safetensors load_file + copy"])
    return rows, result


def stall(preset: str, quick: bool, rounds: int, work: Path) -> tuple[list[list], dict]:
    from trident.train.trainer import Trainer

    trainers = {}
    for mode in ("sync", "async"):
        config = make_config(preset, STALL_MODEL + (["model.num_layers=4"] if quick else []) +
                             [f"checkpoint.async_save={mode == 'async'}", f"checkpoint.dir={work / mode}"])
        data = RandomTokens(config.model.seq_length, config.model.vocab_size)
        trainers[mode] = Trainer(config, work / mode, datasets=(data, None), vocab_size=config.model.vocab_size,
                                 log=lambda *a, **k: None)
        trainers[mode].train_step()  # warm-up
    record = {mode: collections.defaultdict(list) for mode in trainers}
    for r in range(rounds):
        for mode in ("sync", "async") if r % 2 == 0 else ("async", "sync"):
            trainer, times = trainers[mode], record[mode]
            for key, action in (("step", trainer.train_step), ("save", trainer.save),
                                ("next_step", trainer.train_step), ("wait", trainer.writer.wait)):
                thread_cpu = time.thread_time()
                with Timer() as timer:
                    action()
                times[key].append(timer.wall)
                times[f"{key}_thread_cpu"].append(time.thread_time() - thread_cpu)
    checkpoint_mb = sum(f.stat().st_size for f in complete_checkpoints(work / "sync")[-1].iterdir()) / 1e6
    rows, result = [], {"checkpoint_mb": checkpoint_mb}
    # Every step without a save in flight is a baseline step, whichever trainer ran it.
    base = median(record["sync"]["step"] + record["sync"]["next_step"] + record["async"]["step"])
    base_cpu = median(record["sync"]["step_thread_cpu"] + record["sync"]["next_step_thread_cpu"] +
                      record["async"]["step_thread_cpu"])
    for mode, times in record.items():
        med = {key: median(values) for key, values in times.items()}
        # Only the async save overlaps the next step; a sync save's next step has nothing to wait for.
        overlap = med["next_step"] - base if mode == "async" else 0.0
        effective = med["save"] + overlap + med["wait"]
        rows.append([mode, base, base_cpu, med["save"], med["next_step"], med["next_step_thread_cpu"], med["wait"],
                     effective])
        result[mode] = dict(times) | {"effective_stall_s": effective}
    result["baseline_step_s"] = base
    result["stall_ratio_sync_over_async"] = result["sync"]["effective_stall_s"] / result["async"]["effective_stall_s"]
    return rows, result


def _trainer(preset: str, quick: bool, work: Path, *overrides):
    from trident.train.trainer import Trainer

    config = make_config(preset, STALL_MODEL + (["model.num_layers=4"] if quick else []) + list(overrides) +
                         [f"checkpoint.dir={work}"])
    data = RandomTokens(config.model.seq_length, config.model.vocab_size)
    trainer = Trainer(config, work, datasets=(data, None), vocab_size=config.model.vocab_size,
                      log=lambda *a, **k: None)
    trainer.train_step()
    return trainer


def size(preset: str, quick: bool, work: Path) -> tuple[list[list], dict]:
    """Checkpoint tensor-file bytes per parameter, bf16 and fp32 training."""
    rows, result = [], {}
    for precision in ("bf16", "fp32"):
        trainer = _trainer(preset, quick, work / precision, f"train.precision={precision}")
        trainer.save()
        trainer.writer.wait()
        folder = complete_checkpoints(work / precision)[-1]
        parameters = sum(p.numel() for _, p in trainer.model.named_params)
        by_kind = {kind: sum(f.stat().st_size for f in folder.glob(f"{kind}-*.safetensors"))
                   for kind in ("model", "optim")}
        rows.append([precision, parameters, by_kind["model"] / parameters, by_kind["optim"] / parameters,
                     sum(by_kind.values()) / parameters])
        result[precision] = {"parameters": parameters, "bytes": by_kind,
                             "bytes_per_param": sum(by_kind.values()) / parameters}
    return rows, result


def _resident() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_above(action) -> int:
    """Peak resident bytes above the level at the start while `action` runs (sampled every ms)."""
    base, peak, running = _resident(), [0], [True]

    def sample():
        while running[0]:
            peak[0] = max(peak[0], _resident() - base)
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        action()
    finally:
        running[0] = False
        sampler.join()
    return max(peak[0], _resident() - base)


def _in_child(action, results) -> None:
    results.put(peak_above(action))


def peak_in_fork(action) -> int:
    """peak_above(action) in a forked copy of this process, so memory an earlier run left mapped
    cannot hide this run's (the copy starts from the same pages, shared until written)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_in_child, args=(action, results))
    child.start()
    peak = results.get(timeout=1800)
    child.join()
    return peak


def host_memory(preset: str, quick: bool, rounds: int, work: Path) -> tuple[list[list], dict]:
    """Peak host memory of an async save against fp32 copies + safetensors save_file of the same state."""
    from trident.parallel.state import ADAM_KINDS

    trainer = _trainer(preset, quick, work / "async", "train.precision=bf16", "checkpoint.async_save=true")
    model = trainer.model

    def trident_async():
        trainer.save()
        trainer.writer.wait()

    def previous_way():
        tensors = {name: p.detach().to("cpu", torch.float32, copy=True) for name, p in model.named_params}
        tensors |= {f"{piece.name}/{piece.kind}/{piece.flat[0]}": piece.tensor.detach().to("cpu", copy=True)
                    for piece in model.state_pieces() if piece.kind in ADAM_KINDS}
        save_file(tensors, work / "previous.safetensors")

    peaks = collections.defaultdict(list)
    for r in range(rounds):
        for name, action in ((("trident async save", trident_async), ("fp32 copies + save_file", previous_way))
                             if r % 2 == 0 else (("fp32 copies + save_file", previous_way),
                                                 ("trident async save", trident_async))):
            peaks[name].append(peak_in_fork(action))
    written = {"trident async save": sum(f.stat().st_size for f in complete_checkpoints(work / "async")[-1]
                                         .glob("*-dp*.safetensors")),
               "fp32 copies + save_file": (work / "previous.safetensors").stat().st_size}
    rows, result = [], {}
    for name, values in peaks.items():
        rows.append([name, written[name] / 1e6, min(values) / 1e6, max(values) / 1e6,
                     median(values) / written[name]])
        result[name] = {"written_bytes": written[name], "peak_above_bytes": values,
                        "peak_over_written": median(values) / written[name]}
    result["ratio_previous_over_trident"] = (median(peaks["fp32 copies + save_file"]) /
                                             median(peaks["trident async save"]))
    return rows, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4-layer model, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 4; quick 2)")
    parser.add_argument("--preset", default="gpt-125m")
    parser.add_argument("--dir", default=None, help="where checkpoints are written (default: a temporary folder)")
    parser.add_argument("--sections", default="throughput,stall,size,memory",
                        help="comma-separated: throughput, stall, size, memory")
    args = parser.parse_args()
    torch.set_num_threads(1)  # both sides alike; intra-op threads only fight other jobs on a shared machine
    sections = args.sections.split(",")
    rounds = args.rounds or (2 if args.quick else 4)
    load_start = load_average()
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir))
    report = {"preset": args.preset, "quick": args.quick, "rounds": rounds, "machine_at_start": load_start}
    print(f"{args.preset}{' (4 layers)' if args.quick else ''}; writing to {work}; load {load_start}")
    try:
        if "throughput" in sections:
            rows, report["throughput"] = throughput(args.preset, args.quick, rounds, work / "throughput")
            print_table(f"Throughput, median wall time of {rounds} alternating rounds",
                        ["op", "method", "MB/s", "wall s", "cpu s", "x plain", "x plain + fsync"], rows)
            shutil.rmtree(work / "throughput", ignore_errors=True)
        if "stall" in sections:
            rows, stalls = stall(args.preset, args.quick, rounds, work / "stall")
            report["stall"] = stalls
            print_table(f"Training stall of trainer.save() ({stalls['checkpoint_mb']:.0f} MB checkpoint), "
                        f"median wall s of {rounds} rounds",
                        ["async_save", "baseline step", "its thread cpu", "save() call", "next step",
                         "its thread cpu", "wait() after", "effective stall"], rows)
            print(f"\nsync/async effective stall: {stalls['stall_ratio_sync_over_async']:.1f}x")
            shutil.rmtree(work / "stall", ignore_errors=True)
        if "size" in sections:
            rows, report["size"] = size(args.preset, args.quick, work / "size")
            print_table("Checkpoint bytes per parameter (tensor files)",
                        ["precision", "parameters", "model B/param", "optim B/param", "total B/param"], rows)
            shutil.rmtree(work / "size", ignore_errors=True)
        if "memory" in sections:
            rows, memory = host_memory(args.preset, args.quick, rounds, work / "memory")
            report["memory"] = memory
            print_table(f"Host memory during a save (bf16 state), {rounds} alternating rounds",
                        ["method", "MB written", "min peak MB", "max peak MB", "median peak / written"], rows)
            print(f"\nfp32 copies + save_file / trident async save, peak host memory: "
                  f"{memory['ratio_previous_over_trident']:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit_json("checkpoint", report)


if __name__ == "__main__":
    main()
