"""One rank of a real layout, rehearsed in this process.

The rank joins torch's fake process group (world = the layout's size, this rank's id): every
collective and point-to-point call of the real code is issued and returns at once. Under
FakeTensorMode every tensor has its shape, dtype and size but no memory and no arithmetic, so a
530B rank builds and steps on a laptop. The code is the trainer's: `parallelize` builds the
chunks, executor, buffers and ZeRO shard, and `ParallelModel.train_step` runs every micro-batch of a
full global batch through the configured schedule, the gradient reduction, clipping and the update.
The one difference: a fake scalar has no value, so the loss and gradient norm read as 1.0.

Memory is counted by category (LiveBytes sees every tensor the code allocates):
  weights, gradients, optimizer  the flat parameter and fp32 gradient buffers and the optimizer
                                 state this rank owns (exact bytes of those tensors)
  activations                    peak during forward/backward above what was live before it
                                 (saved activations, logits, pipeline receive buffers)
  buffers                        peak during gradient reduction and the update above what was live
                                 before forward/backward (reduce-scatter outputs, temporaries: a
                                 bucket's reduction may start during the backward, as the pipeline
                                 drains, so its output is already live when the reduction phase begins)
  peak                           the highest live total of the whole build and step
"""
from __future__ import annotations

import gc
import resource
import time

import torch
import torch.distributed as dist

from trident.checkpoint.writer import save_plan
from trident.config import Config
from trident.parallel.mesh import build_mesh
from trident.parallel.parallelize import ParallelModel, parallelize
from trident.rehearse.live_bytes import LiveBytes

CATEGORIES = ("weights", "gradients", "optimizer", "activations", "buffers")


def default_ranks(config: Config) -> list[int]:
    """The first rank of the first, a middle and the last pipeline stage (dp 0, cp 0, tp 0)."""
    pp, tp, cp = config.parallel.pp, config.parallel.tp, config.parallel.cp
    return sorted({stage * cp * tp for stage in (0, pp // 2, pp - 1)})


def _batches(config: Config, mesh) -> tuple[list, int]:
    """A full global batch's micro-batches for this DP rank (fake token ids; a CP rank's seq_length / cp
    of each sequence, as the data loader cuts them), and the loss divisor."""
    t, m = config.train, config.model
    micro = t.global_batch_size // (t.micro_batch_size * mesh.dp)
    shape = (t.micro_batch_size, m.seq_length // mesh.cp)
    batch = [(torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)) for _ in range(micro)]
    return batch, micro * mesh.dp


def _step(model: ParallelModel, live: LiveBytes, batches: list, divisor: int, lr: float) -> dict[str, int]:
    """One training step; the live-bytes peak of each phase above the level before the step."""
    peaks: dict[str, int] = {}
    gc.collect()  # the level before the step: what is reachable, not what gc has yet to free
    before = live.now

    def on_phase(name: str) -> None:
        peaks[name] = live.peak - before
        # Tensors a phase leaves in reference cycles (a lazy import's caught exception keeps the first
        # forward's frames) live until Python's cyclic gc happens to run: freed at every phase's end,
        # so the next phase's peak never depends on when that was (it once put 8 KB into "buffers").
        gc.collect()
        live.reset_peak()

    live.reset_peak()
    model.train_step(batches, divisor, lr, on_phase)
    return peaks


def measure(config: Config, mesh, steps: int = 1) -> dict:
    """Build this rank's ParallelModel and run `steps` training steps on a full global batch of
    zeros, counting live bytes; real tensors, or fake ones when called under FakeTensorMode."""
    gc.freeze()  # what exists already is not this rank's: _step's collections scan only what comes now
    try:
        with LiveBytes() as live:
            model = parallelize(config, mesh, torch.device("cpu"))
            batches, divisor = _batches(config, mesh)
            phases = [_step(model, live, batches, divisor, config.train.lr) for _ in range(steps)]
            peak = live.highest
    finally:
        gc.unfreeze()
    files = save_plan(model.state_pieces(), mesh)  # after measuring: its copies are not the step's
    measured = model.state_bytes() | {
        "activations": max(p["forward_backward"] for p in phases),
        "buffers": max(max(p["finalize"], p["step"]) for p in phases), "peak": peak}
    return {"rank": mesh.rank, "stage": mesh.pp_rank,
            "coordinates": {"dp": mesh.dp_rank, "pp": mesh.pp_rank, "tp": mesh.tp_rank}
            | ({"cp": mesh.cp_rank} if mesh.cp > 1 else {}),
            "parameters": sum(param.numel() for _, param in model.named_params), "micro_batches": len(batches),
            "measured": measured, "checkpoint_files": files}


def rehearse_rank(config: Config, world_size: int, rank: int, steps: int = 1) -> dict:
    """`rank` of `config`'s layout on `world_size` ranks, in this process: fake process group,
    fake tensors. What it measured, its time and this process's peak resident memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    began = time.perf_counter()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        p = config.parallel
        mesh = build_mesh(p.tp, p.pp, p.dp, dp_shard=p.dp_shard, cp=p.cp)
        with FakeTensorMode(allow_non_fake_inputs=True):  # RNG states stay real tensors
            result = measure(config, mesh, steps)
    finally:
        dist.destroy_process_group()
    return result | {"seconds": round(time.perf_counter() - began, 2),
                     "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
