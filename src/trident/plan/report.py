"""Planner output: rich tables for people, JSON for scripts, and MT-NLG's published figures beside ours."""
from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from trident.config import Config
from trident.plan.search import Plan, Ranking

GIB = 2**30
# the ranking's columns, said under it (K, v, sp are not self-explanatory)
COLUMNS = ("columns: K = ZeRO's shard group (parallel.dp_shard; blank without ZeRO), mb = micro-batch, "
           "v = virtual pipeline stages per GPU (the schedules with virtual stages), ckpt = activation checkpointing, "
           "sp = sequence parallelism, GiB = memory per GPU, cp-only = fits only with cp >= 2")
# TFLOP/s as Megatron and MT-NLG count them (docs/planner.md), against MFU, which counts the model's FLOPs only
TFLOPS_NOTE = ("TFLOP/s per GPU counts a full recomputation of the forward pass (Megatron's and the MT-NLG "
               "paper's convention, 4 passes a step, whatever the layout recomputes); MFU counts the model's "
               "FLOPs only (3 passes) against the GPU's peak")
# a step's tokens above which the plan remarks on the batch: 4x MT-NLG's 1,920 x 2,048 = 3.9M tokens
MANY_TOKENS = 4 * 1920 * 2048
# MT-NLG 530B on DGX A100-80GB (Smith et al. 2022, docs/reference.md): GPUs -> (s per iteration, TFLOP/s per GPU).
MTNLG_POINTS = {2240: (60.1, 126.0), 2800: (50.2, 121.0), 3360: (44.4, 113.0)}


def paper_point(config: Config, gpus: int, hardware: str) -> tuple[float, float] | None:
    """The published (step seconds, TFLOP/s per GPU) for this run, when it is MT-NLG's 530B on A100s."""
    m = config.model
    is_mtnlg = (m.num_layers, m.hidden_size, m.num_heads, m.seq_length) == (105, 20480, 128, 2048)
    if is_mtnlg and config.train.global_batch_size == 1920 and hardware == "a100-80gb":
        return MTNLG_POINTS.get(gpus)
    return None


def _gib(value: float) -> str:
    return f"{value / GIB:,.2f}" if value >= 0.01 * GIB or value == 0 else f"{value / GIB:.2e}"


def memory_table(plan: Plan) -> Table:
    mem = plan.memory
    table = Table(title=f"Memory per GPU (worst stage: {mem.stage}, {mem.in_flight:g} micro-batches in flight)")
    table.add_column("component")
    table.add_column("GiB", justify="right")
    table.add_column("note")
    layout = plan.layout
    table.add_row("weights", _gib(mem.weights), f"{mem.params / 1e9:.3f} B parameters on this GPU")
    master = mem.optimizer_unsharded > 8 * mem.params + 1  # 16-bit weights: an fp32 master copy exists
    table.add_row("gradients", _gib(mem.gradients), "fp32" if layout.grad_dtype == "fp32" or not master
                  else "training precision")
    stage = layout.zero_effective
    group = f"dp={layout.dp}" + (f" x cp={layout.cp}" if layout.cp > 1 else "")
    over = f"shard groups of {layout.shard} ranks, {layout.replicas} replicas" if layout.replicas > 1 else group
    sharded = f"ZeRO-{stage} over {over}" if stage else "not sharded"
    table.add_row("optimizer", _gib(mem.optimizer), ("fp32 master + " if master else "") + f"Adam m, v; {sharded}")
    other = mem.optimizer_unsharded / layout.gradient_group if not stage else mem.optimizer_unsharded
    table.add_row("  (optimizer with ZeRO-1)" if not stage else "  (optimizer without ZeRO)",
                  _gib(other), "for comparison, not in the total")
    table.add_row("activations", _gib(mem.activations), f"checkpointing={layout.checkpointing}"
                  + (", sequence parallel" if layout.sequence_parallel else "")
                  + (f", cp={layout.cp}: 1/{layout.cp} of each sequence, ring buffers" if layout.cp > 1 else ""))
    table.add_row("logits", _gib(mem.logits), "last stage: the loss's fp32 probabilities and working set")
    if stage >= 2:
        table.add_row("ZeRO working set", _gib(mem.staging + mem.gathered), "fp32 gradient buckets staged for their "
                      "reduce-scatter" + (", gathered weights (root, a block, the next)" if stage == 3 else ""))
    table.add_row("buffers", _gib(mem.buffers), "pipeline p2p and gradient buckets" + (
        " (buckets live after backward: the total takes the larger of them and the activations)"
        if mem.reduction_after_backward else ""))
    table.add_row("total", _gib(mem.total), f"usable {_gib(plan.usable_bytes)} GiB on {plan.hardware}", style="bold")
    return table


def time_table(plan: Plan, paper: tuple[float, float] | None) -> Table:
    t = plan.time
    table = Table(title=f"Step time ({t.micro_batches} micro-batches per replica, slowest stage {t.slowest_stage})")
    table.add_column("component")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    table.add_column("paper", justify="right")
    table.add_column("note")
    rows = [("compute", t.compute, f"of which recompute {t.recompute:.2f} s"),
            ("TP collectives", t.tp_comm, ""), ("PP point-to-point", t.pp_comm, ""),
            ("CP ring (exposed)", t.cp_comm, f"{t.cp_bytes / 2**30:.2f} GiB sent per rank" if t.cp_bytes else ""),
            ("pipeline bubble", t.bubble, f"{t.bubble_fraction:.1%} of the busy time"),
            ("DP gradient reduction", t.dp_comm, ""), ("optimizer step", t.optimizer, "")]
    for name, seconds, note in rows:
        table.add_row(name, f"{seconds:.3f}", f"{seconds / t.total:.1%}", "", note)
    error = lambda ours, theirs: f"{theirs:g} ({ours / theirs - 1:+.1%})"  # noqa: E731
    table.add_row("step", f"{t.total:.2f}", "100%", error(t.total, paper[0]) if paper else "", style="bold")
    table.add_row("TFLOP/s per GPU", f"{t.tflops_per_gpu:.1f}", "", error(t.tflops_per_gpu, paper[1]) if paper else "",
                  "counts a full recomputation (Megatron's convention)")
    table.add_row("MFU", f"{t.mfu:.1%}", "", "")
    return table


def _console() -> Console:
    return Console(width=max(Console().width, 120))  # the tables are wide; a pipe defaults to 80 columns


def print_plan(plan: Plan, config: Config, gpus: int, console: Console | None = None) -> None:
    console = console or _console()
    console.print(f"[bold]{plan.layout.label()}[/] on {gpus} x {plan.hardware}")
    if plan.memory is not None:
        console.print(memory_table(plan))
        console.print(time_table(plan, paper_point(config, gpus, plan.hardware)))
    if plan.needs_cp:
        console.print(f"fits only with cp >= 2: at cp=1 (dp={plan.layout.gradient_group}) it does not fit")
    for reason in plan.reasons:
        console.print(f"[red]rejected:[/] {reason}")


def print_ranking(ranking: Ranking, top: int, by_mesh: bool, console: Console | None = None,
                  current: int | None = None) -> None:
    console = console or _console()
    plans = ranking.best_per_mesh() if by_mesh else ranking.plans
    what = "best layout of each (tp, pp, cp, dp)" if by_mesh else "layouts"
    table = Table(title=f"Top {min(top, len(plans))} {what} of {len(ranking.plans)} that fit "
                        f"({ranking.examined} examined)")
    for name in ("#", "tp", "pp", "cp", "dp", "K", "mb", "v", "ckpt", "zero", "sp", "GiB", "step s", "TFLOP/s",
                 "MFU", "bubble", "cp-only"):
        table.add_column(name, justify="right")
    for i, plan in enumerate(plans[:top], 1):
        lay, t = plan.layout, plan.time
        table.add_row(str(i), str(lay.tp), str(lay.pp), str(lay.cp), str(lay.dp), str(lay.shard) if lay.zero else "",
                      str(lay.micro_batch), str(lay.virtual_stages), lay.checkpointing, str(lay.zero_stage),
                      "y" if lay.sequence_parallel else "", f"{plan.memory.total / GIB:.1f}", f"{t.total:.2f}",
                      f"{t.tflops_per_gpu:.1f}", f"{t.mfu:.1%}", f"{t.bubble_fraction:.1%}", "y" if plan.needs_cp else "")
    console.print(table)
    console.print(COLUMNS)
    console.print(TFLOPS_NOTE)
    for line in context_summary(ranking):
        console.print(line)
    if current is not None:
        console.print(f"the config's own layout ranks #{current} of {len(ranking.plans)}")
    rejected = Table(title="Rejected layouts by reason (mesh: counted once per (tp, pp, cp, dp))")
    rejected.add_column("count", justify="right")
    rejected.add_column("reason")
    for kind, count in ranking.rejected.most_common():
        rejected.add_row(str(count), ranking.rejected.described(kind))
    console.print(rejected)


def batch_remark(config: Config) -> str | None:
    """A remark when one step holds far more tokens than large models train on (e.g. a preset's global batch
    kept while model.seq_length grew 32x), with the global batch that keeps MT-NLG's tokens a step."""
    sequences, length = config.train.global_batch_size, config.model.seq_length
    if sequences * length <= MANY_TOKENS:
        return None
    keeps = max(1, round(1920 * 2048 / length))
    return (f"note: a step holds {sequences:,} sequences of {length:,} tokens = {sequences * length / 1e6:,.0f}M "
            f"tokens, {sequences * length / (1920 * 2048):.0f}x MT-NLG's 3.9M (1,920 x 2,048): a longer "
            f"model.seq_length usually comes with fewer sequences a step (train.global_batch_size={keeps} keeps "
            f"3.9M tokens); planned below with the batch as given")


def context_summary(ranking: Ranking) -> list[str]:
    """What context parallelism changes: layouts that fit only with cp >= 2, and the fastest of them."""
    needing = [plan for plan in ranking.plans if plan.needs_cp]
    if not needing:
        return []
    lines = [f"{len(needing)} of {len(ranking.plans)} fitting layouts fit only with cp >= 2 "
             "(cp-only: at cp=1 the same layout does not fit)"]
    fastest = needing[0]
    lines.append(f"fastest that fits only with cp >= 2: {fastest.layout.label()}, {fastest.time.total:.2f} s a step")
    alone = next((plan for plan in ranking.plans if plan.layout.cp == 1), None)
    lines.append("no layout fits without context parallelism" if alone is None else
                 f"fastest without context parallelism: {alone.layout.label()}, {alone.time.total:.2f} s a step")
    return lines


def plan_json(plan: Plan, config: Config, gpus: int) -> dict:
    paper = paper_point(config, gpus, plan.hardware)
    out = {"gpus": gpus, **plan.to_dict()}
    if paper:
        out["paper"] = {"step_time_s": paper[0], "tflops_per_gpu": paper[1]}
    return out


def ranking_json(ranking: Ranking, top: int, by_mesh: bool, current: int | None = None) -> dict:
    plans = ranking.best_per_mesh() if by_mesh else ranking.plans
    return {"examined": ranking.examined, "fitting": len(ranking.plans), "config_layout_rank": current,
            "fit_only_with_cp": sum(plan.needs_cp for plan in ranking.plans),
            "fit_without_cp": sum(plan.layout.cp == 1 for plan in ranking.plans),
            "by_mesh": by_mesh, "plans": [p.to_dict() for p in plans[:top]],
            "rejected": {ranking.rejected.described(kind): count for kind, count in ranking.rejected.most_common()}}


@dataclass
class Check:
    """One predicted-versus-measured figure of a real run."""
    run: str
    quantity: str
    predicted: float
    measured: float
    tolerance: float  # allowed |predicted / measured - 1|

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1 if self.measured else float("inf")

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.tolerance


def compare_measured(run: str, plan: Plan, step_time_s: float, peak_memory_bytes: float,
                     baseline_bytes: float = 0.0, time_tolerance: float = 0.30,
                     memory_tolerance: float = 0.20) -> list[Check]:
    """The plan's step time and memory against a measured run. `baseline_bytes` is what the process
    holds before any model tensor (interpreter, torch, allocator pools): it is subtracted from the
    measured peak, since the plan counts tensors only."""
    if plan.memory is None or plan.time is None:
        raise ValueError(f"{run}: layout {plan.layout.label()} was rejected: {'; '.join(plan.reasons)}")
    return [Check(run, "step time s", plan.time.total, step_time_s, time_tolerance),
            Check(run, "peak memory MiB", plan.memory.total / 2**20, (peak_memory_bytes - baseline_bytes) / 2**20,
                  memory_tolerance)]
