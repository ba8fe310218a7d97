"""Timing on the device's clock and the host round trips of issue 59 (items 6 and 9), on one device.

Each check runs the code as trident runs it, beside the old way in the same process:
  clock     a kernel the host only queues (CUDA: torch.cuda._sleep; CPU: a matmul) inside a box of a
            TimelineRecorder on clock_for(device) and of one on the host clock; pass on CUDA when the
            device box is the kernel's time (within 20% of the wall time to its end) and the host box
            a fraction of it (what the pipeline timeline, bubble and stragglers measured before);
  decode    synchronizing CUDA calls (torch.cuda.set_sync_debug_mode) in greedy decode passes of the
            generation engine on a small GPT: pass at most 1 a pass (the result table's copy);
  init      one shard drawn by model/init's staging (pinned buffer, one copy) against the tile-by-tile
            copies into the device tensor it replaced: seconds, ratio, values bit-identical (pass);
  snapshot  how long a checkpoint snapshot of ~1 GiB of device tensors holds training (non-blocking into
            pinned memory + one event) against the old synchronous copies, and when its copies are done;
  digest    replica digests on the device against xxh64 of host copies of the same tensors.
On CPU (--device cpu) the same code runs at small sizes: a dry run of the script (the CUDA-only checks
report, never fail). Exit status 1 when a CUDA check fails.

    python benchmarks/gpu_paths.py [--device cuda|cpu]
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

from common import emit_json, print_table


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_clock(device: torch.device) -> dict:
    from trident.parallel.device_clock import HostClock, clock_for
    from trident.parallel.pipeline.timeline import TimelineRecorder

    on_device, on_host = TimelineRecorder(0, clock_for(device)), TimelineRecorder(0, HostClock())
    a = torch.randn(512, 512, device=device)
    work = (lambda: torch.cuda._sleep(200_000_000)) if device.type == "cuda" else (lambda: [a @ a for _ in range(20)])
    work()  # warm-up
    _sync(device)
    start = time.perf_counter()
    on_device.start()
    on_host.start()
    with on_device.record("forward", 0, 0):
        with on_host.record("forward", 0, 0):
            work()
    host_box = on_host.stop()[0]
    device_box = on_device.stop()[0]  # one synchronize: the kernel is done after it
    wall = time.perf_counter() - start
    device_s, host_s = device_box.end - device_box.start, host_box.end - host_box.start
    ok = device.type != "cuda" or (abs(device_s - wall) < 0.2 * wall and host_s < 0.2 * device_s)
    return {"check": "clock", "ok": ok, "device_box_s": device_s, "host_box_s": host_s, "wall_s": wall,
            "clock": type(on_device.clock).__name__}


def check_decode(device: torch.device, passes: int = 8) -> dict:
    from trident.config import ModelConfig
    from trident.infer.engine import Engine
    from trident.infer.plan import RowSpec, build_plan
    from trident.model.gpt import build_model

    cfg = ModelConfig(num_layers=2, hidden_size=256, num_heads=4, seq_length=128, vocab_size=4096)
    engine = Engine.single(build_model(cfg, cfg.padded_vocab_size(1), seed=0, device=device), 4096, slots=4)
    prompts = [[(7 * r + i) % 4000 + 1 for i in range(12 + r)] for r in range(4)]
    out = engine.run(build_plan([RowSpec(r, p, 0) for r, p in enumerate(prompts)], 128, 0))
    tokens = [out.token(r) for r in range(4)]
    syncs, where = [], set()
    for step in range(passes):
        plan = build_plan([RowSpec(r, [tokens[r]], len(p) + step) for r, p in enumerate(prompts)], 128, 0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            try:
                out = engine.run(plan)
            finally:
                if device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
        found = [w for w in caught if "synchroniz" in str(w.message)]
        syncs.append(len(found))
        where |= {f"{w.filename.rsplit('/', 1)[-1]}:{w.lineno}" for w in found}
        tokens = [out.token(r) for r in range(4)]
    ok = device.type != "cuda" or max(syncs) <= 1
    return {"check": "decode", "ok": ok, "syncs_per_pass": syncs, "where": sorted(where)}


def check_init(device: torch.device, shape: tuple[int, int]) -> dict:
    from trident.model.init import _draw_tiles, normal_tiles_

    full, offsets = (shape[0], 2 * shape[1]), [0, shape[1]]  # a TP rank's half of a matrix
    times, shards = {}, {}
    for how in ("tiles", "staged", "tiles", "staged"):  # twice each: the second runs are timed
        out = torch.empty(shape, dtype=torch.bfloat16, device=device)
        _sync(device)
        start = time.perf_counter()
        if how == "tiles":  # what init did before: each tile's overlap copied from pageable memory
            _draw_tiles(out, offsets, full, 0.02, 1, "blocks.0.mlp.fc1.weight")
        else:
            normal_tiles_(out, offsets, full, 0.02, 1, "blocks.0.mlp.fc1.weight")
        _sync(device)
        times[how], shards[how] = time.perf_counter() - start, out
    same = torch.equal(shards["tiles"].cpu(), shards["staged"].cpu())
    return {"check": "init", "ok": same, "shape": list(shape), "tiles_s": times["tiles"],
            "staged_s": times["staged"], "ratio": times["tiles"] / times["staged"], "bit_identical": same}


def _pieces(device: torch.device, total_bytes: int):
    from trident.parallel.state import StatePiece

    sizes = [total_bytes // 4 // 8] * 8  # eight fp32 pieces
    return [StatePiece(f"w{i}", "weight", torch.randn(n, device=device), (n,), (0,), (n,))
            for i, n in enumerate(sizes)]


def check_snapshot(device: torch.device, total_bytes: int) -> dict:
    from trident.checkpoint.writer import snapshot
    from trident.parallel.mesh import Mesh

    pieces, mesh = _pieces(device, total_bytes), Mesh()
    result = {}
    for attempt in range(2):  # the second: pinned blocks come from torch's host cache, as at every later save
        _sync(device)
        start = time.perf_counter()
        old = [piece.tensor.detach().to("cpu", copy=True) for piece in pieces]
        result["old_stall_s"] = time.perf_counter() - start
        _sync(device)
        start = time.perf_counter()
        model, _, _, _, copied = snapshot(pieces, mesh)
        result["stall_s"] = time.perf_counter() - start
        if copied is not None:
            copied.synchronize()
        result["copies_done_s"] = time.perf_counter() - start
    same = all(torch.equal(a, b) for a, b in zip(old, model.values()))
    return {"check": "snapshot", "ok": same, "gib": total_bytes / 2**30, **result,
            "ratio": result["old_stall_s"] / result["stall_s"]}


def check_digest(device: torch.device, total_bytes: int) -> dict:
    import xxhash

    from trident.parallel.replicas import digests

    tensors = [piece.tensor for piece in _pieces(device, total_bytes)]
    digests(tensors)  # warm-up
    _sync(device)
    start = time.perf_counter()
    old = [xxhash.xxh64(t.contiguous().view(torch.uint8).cpu().numpy()).intdigest() for t in tensors]
    old_s = time.perf_counter() - start
    start = time.perf_counter()
    new = digests(tensors)
    new_s = time.perf_counter() - start
    ok = len(set(new)) == len(new) == len(old)
    return {"check": "digest", "ok": ok, "gib": total_bytes / 2**30, "old_s": old_s, "device_s": new_s,
            "ratio": old_s / new_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_paths.py: no CUDA device (run --device cpu for the dry run)")
        return 1
    big = device.type == "cuda"
    results = [check_clock(device), check_decode(device),
               check_init(device, (8192, 4096) if big else (512, 384)),
               check_snapshot(device, 2**30 if big else 2**24), check_digest(device, 2**30 if big else 2**24)]
    rows = [[r["check"], "ok" if r["ok"] else "FAILED", ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                                  for k, v in r.items() if k not in ("check", "ok"))]
            for r in results]
    print_table(f"issue 59 items 6 and 9 on {device}", ["check", "result", "measured"], rows)
    emit_json("gpu_paths", {"device": str(device), "results": results})
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
