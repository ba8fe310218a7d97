"""trident's pipeline beside DeepSpeed's pipeline engine on this CPU: step time of trident 1F1B,
trident interleaved 1F1B (v=2), trident's zero-bubble ZB-H1 and ZB-H2 and DeepSpeed's PipelineEngine
(1F1B) on the same model, at pp2 and at pp2 x dp2 with ZeRO-1, and DeepSpeed's time over trident's
(> 1: trident is faster). Beside each, the activation sets each stage holds at its peak (trident:
pipeline.schedules.peak_inflight of the list gloo runs, interleaved in whole-stage units; DeepSpeed:
the buffers its TrainSchedule allocates, num_pipe_buffers, at least 2 a stage, so its last stage
shows 2 where it holds 1): the schedules that fill more of the bubble hold more.

The model is one GPT (4 layers x 256 hidden, 8 heads, seq 256, vocab 1024, fp32, no dropout), built
by trident's own code: DeepSpeed's PipelineModule gets trident's embedding, blocks and final norm as
its layers (the word embedding tied to the head through a TiedLayerSpec, as trident ties it), so both
do the same arithmetic (the table prints each system's loss at steps 1 and 2: equal at step 2 means
the same update too); only the engines differ (schedule execution, p2p, gradient reduction, ZeRO-1,
optimizer step: torch's fused AdamW for both, clipping at 1.0 for both). Global batch 16 in 4
micro-batches per pipeline (micro-batch 4 at pp2, 2 at pp2 x dp2).

Every system runs in the same gloo processes (one thread a rank; DeepSpeed with DS_ACCELERATOR=cpu
and the gloo backend), one after the other in interleaved rounds: after one warm-up step of each
system, every round times `--steps` steps of each system (barrier, step, barrier; the round's first
system rotates). Three figures per system: DeepSpeed's best round over the system's best round; the
median over rounds of the ratio within a round (systems timed next to each other see the same load
from other jobs); and the CPU seconds a step costs all ranks together (each rank's median over rounds), the work each
engine does, which the load disturbs much less than the wall time.
Each process keeps freed memory for reuse from its start (train.malloc_keep_freed, as `trident
train` applies it), which DeepSpeed's engine in the same process shares.
Where there is a core a rank (pp2 here) each rank is pinned to its own core; pp2 x dp2 is 4
processes on however many cores there are (2 here): time-shared, unpinned.
Where pp2 x dp2's processes outnumber the cores it also prints the ceiling of that layout: DeepSpeed's
best step over trident's cheapest pp2 round's CPU seconds per core (shared_core_ceiling).

    DS_ACCELERATOR=cpu python benchmarks/pipeline_deepspeed.py [--rounds 8] [--steps 1] [--layouts pp2,pp2xdp2]

Needs `pip install -e .[bench]` (deepspeed).
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported anywhere

import torch
import torch.nn.functional as F
from torch import nn

from common import emit_json, load_average, make_config, median, print_table, run_ranks

MODEL = ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
         "model.vocab_size=1024", "train.precision=fp32", "train.device=cpu", "train.clip_grad=1.0",
         "train.lr=1e-4", "train.weight_decay=0.01"]
GLOBAL_BATCH, MICRO_BATCHES = 16, 4
LAYOUTS = {"pp2": (2, 1), "pp2xdp2": (2, 2)}  # name -> (pp, dp); ZeRO-1 whenever dp > 1
SCHEDULES = {"trident 1F1B": "1f1b", "trident interleaved": "interleaved", "trident ZB-H1": "zb-h1",
             "trident ZB-H2": "zb-h2"}
SYSTEMS = (*SCHEDULES, "DeepSpeed")
TRIDENT = tuple(SCHEDULES)  # trident's schedules: its best is the one compared with DeepSpeed
NO_OVERLAP = "trident 1F1B, DP reduction after the pipeline"  # with dp > 1: what the overlap gains


class EmbeddingPipe(nn.Module):
    """trident's embedding as a DeepSpeed pipeline layer; `weight` (the word embedding) is tied to the head."""

    def __init__(self, embedding: nn.Module):
        super().__init__()
        self.embedding = embedding

    @property
    def weight(self) -> torch.Tensor:
        return self.embedding.word.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embedding(tokens)  # [s, b, h], as trident's stages exchange it


class BlockPipe(nn.Module):
    """A trident transformer block as a DeepSpeed pipeline layer (the unit DeepSpeed balances stages by)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x, None, selective=False)


class NormPipe(nn.Module):
    """trident's final norm as a DeepSpeed pipeline layer."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def tied_head(layer: EmbeddingPipe, hidden: torch.Tensor) -> torch.Tensor:
    return F.linear(hidden, layer.weight)  # [s, b, V]: trident's parallel_lm_logits with tp = 1


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy in fp32, as trident's loss (labels [b, s], logits [s, b, V])."""
    return F.cross_entropy(logits.float().flatten(0, 1), labels.t().flatten())


def deepspeed_step(config, pp: int, dp: int, batches: list):
    """DeepSpeed's PipelineEngine over trident's GPT layers; returns a function running one step."""
    import deepspeed
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec

    from trident.model.gpt import build_model

    gpt = build_model(config.model, config.model.padded_vocab_size(1), config.train.seed)
    layers = [TiedLayerSpec("embed", EmbeddingPipe, gpt.embedding, tied_weight_attr="weight")]
    layers += [LayerSpec(BlockPipe, block) for block in gpt.blocks.values()]
    layers += [LayerSpec(NormPipe, gpt.final_norm),
               TiedLayerSpec("embed", EmbeddingPipe, gpt.embedding, forward_fn=tied_head, tied_weight_attr="weight")]
    deepspeed.init_distributed(dist_backend="gloo")
    module = PipelineModule(layers, num_stages=pp, loss_fn=token_loss, partition_method="type:BlockPipe")  # 2 blocks a stage, as trident
    t = config.train
    optimizer = torch.optim.AdamW(module.parameters(), lr=t.lr, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps,
                                  weight_decay=t.weight_decay, fused=True)
    ds_config = {"train_batch_size": GLOBAL_BATCH, "train_micro_batch_size_per_gpu": GLOBAL_BATCH // MICRO_BATCHES // dp,
                 "gradient_accumulation_steps": MICRO_BATCHES, "gradient_clipping": t.clip_grad,
                 "zero_optimization": {"stage": 1 if dp > 1 else 0}, "zero_allow_untested_optimizer": True,
                 "steps_per_print": 10**9}
    engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, config=ds_config)
    return lambda: float(engine.train_batch(iter(batches)))


def trident_step(pp: int, dp: int, schedule: str, batches: list, overlap: bool = True):
    """trident's ParallelModel for the layout; returns a function running one optimizer step (and
    returning its loss); overlap=False reduces every DP bucket after the pipeline instead."""
    from trident.parallel.mesh import build_mesh
    from trident.parallel.parallelize import parallelize

    v = 2 if schedule == "interleaved" else 1
    config = make_config("demo", MODEL + [f"parallel.pp={pp}", f"parallel.dp={dp}", f"parallel.schedule={schedule}",
                                          f"parallel.virtual_stages={v}", f"parallel.zero_stage={int(dp > 1)}",
                                          f"train.global_batch_size={GLOBAL_BATCH}",
                                          f"train.micro_batch_size={GLOBAL_BATCH // MICRO_BATCHES // dp}",
                                          f"parallel.overlap_grad_reduce={str(overlap).lower()}"])
    model = parallelize(config, build_mesh(1, pp, dp, config.parallel.timeout_s), torch.device("cpu"))
    return lambda: float(model.train_step(batches, MICRO_BATCHES * dp, config.train.lr)[0])


def _timed(step, steps: int) -> tuple[float, float, float]:
    """(median wall seconds of `steps` steps, each between two barriers so all ranks start together;
    median CPU seconds of this process (all its threads) in them; the first step's loss)."""
    import torch.distributed as dist

    wall, cpu, losses = [], [], []
    for _ in range(steps):
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        losses.append(step())
        dist.barrier()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return median(wall), median(cpu), losses[0]


def _batches(config, dp: int, dp_rank: int) -> list:
    """DP rank `dp_rank`'s micro-batches (tokens, labels), the same in every system."""
    micro = GLOBAL_BATCH // MICRO_BATCHES // dp
    generator = torch.Generator().manual_seed(1000 + dp_rank)
    seq, vocab = config.model.seq_length, config.model.vocab_size
    return [(torch.randint(0, vocab, (micro, seq), generator=generator),
             torch.randint(0, vocab, (micro, seq), generator=generator)) for _ in range(MICRO_BATCHES)]


def _worker(rank, world, pp, dp, rounds, steps):
    import torch.distributed as dist

    from trident.train.allocator import keep_freed_memory

    keep_freed_memory()  # before any model, as `trident train` does; DeepSpeed, in these processes, gets it too

    config = make_config("demo", MODEL)
    batches = _batches(config, dp, rank // pp)  # trident: rank = dp_rank * pp + stage
    systems = {name: trident_step(pp, dp, schedule, batches) for name, schedule in SCHEDULES.items()}
    systems["DeepSpeed"] = deepspeed_step(config, pp, dp, _batches(config, dp, rank % dp))  # stage * dp + dp_rank
    if dp > 1:
        systems[NO_OVERLAP] = trident_step(pp, dp, "1f1b", batches, overlap=False)
    # warm-up step; the same weights and data give the same loss, and the same update the same next one
    losses = {name: [step()] for name, step in systems.items()}
    times, cpu = {name: [] for name in systems}, {name: [] for name in systems}
    names = list(systems)
    for index in range(rounds):
        shift = index % len(names)  # a different system first in each round: no fixed order effect
        for name in names[shift:] + names[:shift]:
            seconds, cpu_seconds, loss = _timed(systems[name], steps)
            times[name].append(seconds)
            cpu[name].append(cpu_seconds)
            losses[name].append(loss)
    dist.barrier()
    return times, cpu, {name: values[:2] for name, values in losses.items()}


def activation_sets(pp: int) -> dict[str, list[float]]:
    """Per system, the activation sets (whole-stage micro-batches) each stage holds at its peak."""
    from deepspeed.runtime.pipe.schedule import TrainSchedule

    from trident.parallel.pipeline.overlap import schedule_for
    from trident.parallel.pipeline.schedules import peak_inflight

    sets = {}
    for name, schedule in SCHEDULES.items():
        v = 2 if schedule == "interleaved" else 1
        sets[name] = [peak / v for peak in peak_inflight(schedule_for(schedule, pp, MICRO_BATCHES, v, "overlapped"))]
    sets["DeepSpeed"] = [float(TrainSchedule(MICRO_BATCHES, pp, s).num_pipe_buffers()) for s in range(pp)]
    return sets


def measure(layout: str, rounds: int, steps: int) -> dict:
    pp, dp = LAYOUTS[layout]
    before = load_average()
    pin = pp * dp <= len(os.sched_getaffinity(0))  # a core a rank where there are enough (pp2 here)
    ranks = run_ranks(_worker, pp * dp, pp, dp, rounds, steps, timeout=900, pin_cores=pin)
    times, losses = ranks[0][0], ranks[0][2]
    best = {name: min(values) for name, values in times.items()}
    # CPU seconds a step costs the whole job (sum over ranks of each rank's median over rounds): the
    # work done, which other jobs on the machine disturb far less than the wall time
    cpu = {name: sum(median(rank[1][name]) for rank in ranks) for name in times}
    # the cheapest round's CPU seconds, all ranks together: the least work a step of the system has taken
    cpu_least = {name: min(map(sum, zip(*(rank[1][name] for rank in ranks)))) for name in times}
    trident_best = min(best[name] for name in TRIDENT)
    # per round, DeepSpeed over each system timed next to it: robust when the load drifts between rounds
    paired = {name: median([ds / t for ds, t in zip(times["DeepSpeed"], values)]) for name, values in times.items()}
    return {"layout": layout, "pp": pp, "dp": dp, "zero_stage": int(dp > 1), "processes": pp * dp,
            "cpus": os.cpu_count(), "pinned": pin, "rounds_s": times, "best_s": best, "losses_steps_1_2": losses,
            "cpu_s_per_step": cpu, "cpu_s_least_round": cpu_least,
            "deepspeed_over_cpu": {name: cpu["DeepSpeed"] / cpu[name] for name in cpu},
            "deepspeed_over": {name: best["DeepSpeed"] / best[name] for name in TRIDENT},
            "deepspeed_over_best_trident": best["DeepSpeed"] / trident_best, "deepspeed_over_per_round_median": paired,
            "activation_sets": activation_sets(pp), "load_before": before, "load_after": load_average()}


def shared_core_ceiling(results: list[dict]) -> dict | None:
    """The most trident can gain over DeepSpeed at pp2 x dp2 on this machine, from the same run's pp2.
    pp2 x dp2 does the pp2 step's arithmetic (same model, global batch and optimizer work, micro-batches
    of 2 instead of 4) plus the DP collectives, on processes that share the cores: its step takes at
    least the CPU seconds of trident's cheapest pp2 round over the cores, even were the collectives and
    the time sharing free. DeepSpeed's best pp2 x dp2 step over that floor is the ceiling."""
    by_layout = {result["layout"]: result for result in results}
    pp2, shared = by_layout.get("pp2"), by_layout.get("pp2xdp2")
    if pp2 is None or shared is None or shared["processes"] <= shared["cpus"]:
        return None  # only where the processes share the cores
    cpu = min(pp2["cpu_s_least_round"][name] for name in TRIDENT)
    floor = cpu / shared["cpus"]
    return {"cpus": shared["cpus"], "trident_pp2_cpu_s": cpu, "pp2xdp2_floor_s": floor,
            "deepspeed_pp2xdp2_best_s": shared["best_s"]["DeepSpeed"],
            "ceiling": shared["best_s"]["DeepSpeed"] / floor}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (the best is kept)")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per system per round (median)")
    parser.add_argument("--layouts", default="pp2,pp2xdp2", help=f"comma-separated, of {', '.join(LAYOUTS)}")
    args = parser.parse_args()
    results, rows = [], []
    for layout in args.layouts.split(","):
        result = measure(layout, args.rounds, args.steps)
        results.append(result)
        for name in result["best_s"]:
            ratio = result["best_s"]["DeepSpeed"] / result["best_s"][name]
            rows.append([layout + (" ZeRO-1" if result["dp"] > 1 else ""), name, result["best_s"][name],
                         " / ".join(f"{t:.2f}" for t in result["rounds_s"][name]), f"{ratio:.3f}x",
                         f"{result['deepspeed_over_per_round_median'][name]:.3f}x",
                         f"{result['cpu_s_per_step'][name]:.3f} ({result['deepspeed_over_cpu'][name]:.3f}x)",
                         " / ".join(f"{n:g}" for n in result["activation_sets"].get(name, [])) or "as 1F1B",
                         " / ".join(f"{loss:.5f}" for loss in result["losses_steps_1_2"][name]),
                         f"{result['load_before']['load_1m']} -> {result['load_after']['load_1m']}"])
        print(f"{layout}: {result['processes']} processes on {result['cpus']} cores; DeepSpeed / best trident = "
              f"{result['deepspeed_over_best_trident']:.3f}x", flush=True)
    print_table(f"Step time (s): {args.rounds} interleaved rounds of median-of-{args.steps} steps; speed-up = "
                "DeepSpeed's time / this system's (best: best rounds; median of rounds: ratio within each round)",
                ["layout", "system", "best s", "rounds s", "speed-up (best)", "speed-up (median of rounds)",
                 "CPU s/step, all ranks (DeepSpeed / this)", "activation sets per stage (DeepSpeed: buffers)",
                 "loss steps 1 / 2", "load 1m"], rows)
    ceiling = shared_core_ceiling(results)
    if ceiling:
        print(f"pp2 x dp2 ceiling on {ceiling['cpus']} cores: trident's cheapest pp2 round cost "
              f"{ceiling['trident_pp2_cpu_s']:.3f} CPU s, so no pp2 x dp2 step can take under "
              f"{ceiling['pp2xdp2_floor_s']:.3f} s; DeepSpeed's took {ceiling['deepspeed_pp2xdp2_best_s']:.3f} s: "
              f"at most {ceiling['ceiling']:.3f}x", flush=True)
    emit_json("pipeline_deepspeed", {"model": MODEL, "global_batch": GLOBAL_BATCH, "micro_batches": MICRO_BATCHES,
                                     "rounds": args.rounds, "steps": args.steps, "results": results,
                                     "pp2xdp2_ceiling": ceiling})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
