"""Every valid layout of a model on N devices, checked, costed and ranked by predicted step time.

A layout is (tp, pp, cp, dp, micro-batch, virtual stages, checkpointing, ZeRO stage, ZeRO's shard
group K); sequence parallelism and the 1F1B / GPipe choice come from the config. Context parallelism
is tried where each rank keeps at least MIN_CP_TOKENS of a sequence (below that a ring step's
attention is too small to hide its exchange), hybrid sharding with shard groups inside one node. Invalid layouts are not dropped silently: each
carries the reasons it was rejected, and a ranking counts them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator

from trident.config import CHOICES, Config
from trident.config.pipeline_schedules import ScheduleError, searched_schedule, spec
from trident.hardware import Hardware
from trident.plan.memory import CHECKPOINTING, Layout, MemoryBreakdown, memory_per_gpu, micro_batches
from trident.plan.rejections import Rejections
from trident.plan.time import TimeBreakdown, per_device, shard_span, step_time

ZERO_STAGES = CHOICES["parallel.zero_stage"]
MIN_CP_TOKENS = 1024


@dataclass
class Plan:
    """One layout's verdict: its problems (empty when it is valid and fits) and, when it could be
    costed, its memory and step time."""
    layout: Layout
    hardware: str
    reasons: list[str] = field(default_factory=list)
    memory: MemoryBreakdown | None = None
    time: TimeBreakdown | None = None
    usable_bytes: float = 0.0
    needs_cp: bool = False  # fits, but the same layout without context parallelism (dp x cp ranks of dp) does not

    @property
    def ok(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict:
        return {"layout": vars(self.layout) | {"label": self.layout.label()}, "hardware": self.hardware,
                "ok": self.ok, "reasons": self.reasons, "usable_bytes": self.usable_bytes, "needs_cp": self.needs_cp,
                "memory": self.memory.to_dict() if self.memory else None,
                "time": self.time.to_dict() if self.time else None}


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_problems(config: Config, layout: Layout, gpus: int) -> list[str]:
    """Why this layout cannot run this config on `gpus` devices (empty list: it can), memory aside."""
    m, t, p = config.model, config.train, layout
    problems = []
    if p.gpus != gpus:
        problems.append(f"tp x pp x cp x dp = {p.tp} x {p.pp} x {p.cp} x {p.dp} = {p.gpus} != {gpus} GPUs")
    if m.num_heads % p.tp:
        problems.append(f"tp={p.tp} does not divide model.num_heads={m.num_heads}")
    if m.ffn_size % p.tp:
        problems.append(f"tp={p.tp} does not divide the ffn size {m.ffn_size}")
    if m.kv_heads % p.tp and p.tp % m.kv_heads:
        problems.append(f"tp={p.tp} and model.num_kv_heads={m.kv_heads}: one must divide the other")
    if p.sequence_parallel and m.seq_length % p.tp:
        problems.append(f"sequence parallelism needs model.seq_length={m.seq_length} divisible by tp={p.tp}")
    problems += _context_problems(config, layout)
    if p.gradient_group % p.shard or (p.replicas > 1 and not p.zero):
        problems.append(f"dp_shard={p.dp_shard} must divide dp x cp = {p.gradient_group} and needs ZeRO 1-3")
    if p.pp * p.virtual_stages > m.num_layers:
        problems.append(f"pp x virtual_stages = {p.pp * p.virtual_stages} > model.num_layers={m.num_layers}")
    if p.checkpointing not in CHECKPOINTING:
        problems.append(f"checkpointing must be one of {CHECKPOINTING}, got {p.checkpointing!r}")
    if p.zero_stage not in ZERO_STAGES:
        problems.append(f"zero_stage must be one of {ZERO_STAGES}, got {p.zero_stage}")
    counts: tuple[int, ...] = ()
    if p.micro_batch < 1 or t.global_batch_size % (p.micro_batch * p.dp):
        problems.append(f"train.global_batch_size={t.global_batch_size} is not divisible by "
                        f"micro_batch x dp = {p.micro_batch} x {p.dp}")
    else:
        counts = (micro_batches(config, layout),)
    return problems + _schedule_problems(layout, counts)


def _context_problems(config: Config, layout: Layout) -> list[str]:
    """What context parallelism refuses (config._check_context_parallel's rules)."""
    m, p = config.model, layout
    if p.cp == 1:
        return []
    if m.seq_length % (2 * p.cp):
        return [f"cp={p.cp} does not cut model.seq_length={m.seq_length} into 2 x cp equal chunks"]
    problems = []
    if p.sequence_parallel and (m.seq_length // p.cp) % p.tp:
        problems.append(f"sequence parallelism needs seq_length / cp = {m.seq_length // p.cp} divisible by tp={p.tp}")
    if m.attention_dropout > 0:
        problems.append(f"cp={p.cp} needs model.attention_dropout=0 (ring attention has no dropout)")
    return problems


def _schedule_problems(layout: Layout, counts: tuple[int, ...]) -> list[str]:
    """What the layout's pipeline schedule refuses with `counts` micro-batches per replica: the check
    config validation runs (config.pipeline_schedules)."""
    try:
        schedule = spec(layout.schedule)
    except ScheduleError as error:
        return [str(error)]
    return [problem.message for problem in schedule.check(layout.pp, layout.virtual_stages, counts)]


def evaluate(config: Config, layout: Layout, hardware: Hardware, gpus: int, gpus_per_node: int,
             flash_attention: bool = False, time_if_too_big: bool = True, totals: dict | None = None) -> Plan:
    """Check one layout and, when it is possible, predict its memory and (if it fits, or
    `time_if_too_big`) its step time. `totals`: memory totals of layouts already costed, by layout
    (read for a cp layout's cp = 1 twin, written with this one's)."""
    plan = Plan(layout=layout, hardware=hardware.name, reasons=layout_problems(config, layout, gpus))
    if plan.reasons:
        return plan
    device = per_device(hardware, gpus, gpus_per_node)
    plan.usable_bytes = device.usable_bytes
    # flash_attention: the program of trident's trainer (SDPA, its saved tensors, its loss), on the
    # profile's kind of device; without it Megatron-LM's as the paper ran it
    totals = {} if totals is None else totals
    plan.memory = memory_per_gpu(config, layout, flash_attention, device_kind(hardware))
    totals[layout] = plan.memory.total
    if plan.memory.total <= device.usable_bytes and layout.cp > 1:
        alone = replace(layout, cp=1, dp=layout.gradient_group)  # the same GPUs, their sequences whole
        if alone not in totals:
            totals[alone] = memory_per_gpu(config, alone, flash_attention, device_kind(hardware)).total
        plan.needs_cp = totals[alone] > device.usable_bytes
    if plan.memory.total > device.usable_bytes:
        plan.reasons.append(f"needs {plan.memory.total / 2**30:.1f} GiB per GPU (stage {plan.memory.stage}), "
                            f"more than the {device.usable_bytes / 2**30:.1f} GiB usable on {hardware.name}")
    if plan.ok or time_if_too_big:
        plan.time = step_time(config, layout, device, gpus_per_node)
    return plan


def device_kind(hardware: Hardware) -> str:
    """"cpu" for the CPU profile (ranks as processes on one host, CPU autocast), else "cuda"."""
    return "cpu" if hardware.shared_host else "cuda"


def mesh_problems(config: Config, tp: int, pp: int, dp: int, cp: int = 1) -> list[str]:
    """Problems of a (tp, pp, cp, dp) mesh that no choice of the other knobs can fix."""
    probe = Layout(tp=tp, pp=pp, dp=dp, micro_batch=1, sequence_parallel=config.parallel.sequence_parallel, cp=cp)
    return layout_problems(config, probe, tp * pp * cp * dp)


def context_choices(config: Config, ranks: int, max_cp: int | None = None) -> list[int]:
    """cp degrees to try on `ranks` = gpus / (tp x pp): divisors cutting a sequence into 2 x cp chunks,
    each rank keeping at least MIN_CP_TOKENS tokens (1 always), at most `max_cp` when given."""
    s = config.model.seq_length
    return [cp for cp in divisors(ranks) if cp == 1 or (s % (2 * cp) == 0 and s // cp >= MIN_CP_TOKENS
                                                        and cp <= (max_cp or cp))]


def shard_choices(layout: Layout, gpus_per_node: int | None) -> list[int]:
    """ZeRO shard groups to try: the whole gradient group (dp_shard 0), and hybrid sharding's groups of
    K ranks (1 < K < dp x cp) that stay inside one node of `gpus_per_node` (None: none)."""
    group = layout.gradient_group
    hybrid = [k for k in divisors(group)[1:-1]
              if gpus_per_node and shard_span(replace(layout, dp_shard=k)) <= gpus_per_node]
    return [0] + hybrid


def candidate_layouts(config: Config, gpus: int, rejected: Rejections | None = None, grad_dtype: str = "param",
                      gpus_per_node: int | None = None, max_cp: int | None = None) -> Iterator[Layout]:
    """Every (tp, pp, cp, dp, micro-batch, v, checkpointing, zero, dp_shard) with tp x pp x cp x dp = gpus
    that passes layout_problems (hybrid sharding only given `gpus_per_node`; cp up to `max_cp`). Meshes
    that cannot hold the model are counted in `rejected` once per mesh; other rejected layouts once per layout."""
    for tp in divisors(gpus):
        for pp in divisors(gpus // tp):
            for cp in context_choices(config, gpus // (tp * pp), max_cp):
                dp = gpus // (tp * pp * cp)
                problems = mesh_problems(config, tp, pp, dp, cp)
                for reason in problems:
                    if rejected is not None:
                        rejected.add("mesh: " + reason)
                if not problems:
                    yield from _mesh_layouts(config, gpus, (tp, pp, cp, dp), rejected, grad_dtype, gpus_per_node)


def _mesh_layouts(config: Config, gpus: int, mesh: tuple[int, int, int, int], rejected: Rejections | None,
                  grad_dtype: str, gpus_per_node: int | None) -> Iterator[Layout]:
    """candidate_layouts on one (tp, pp, cp, dp) mesh."""
    m, t = config.model, config.train
    tp, pp, cp, dp = mesh
    zeros = ZERO_STAGES if dp * cp > 1 else (0,)
    for micro in divisors(t.global_batch_size // dp):
        for v in range(1, m.num_layers // pp + 1) if pp > 1 else (1,):
            base = Layout(tp=tp, pp=pp, dp=dp, micro_batch=micro, virtual_stages=v, cp=cp,
                          sequence_parallel=config.parallel.sequence_parallel and tp > 1,
                          schedule=searched_schedule(config.parallel.schedule, v), grad_dtype=grad_dtype)
            problems = layout_problems(config, base, gpus)
            if problems:  # no checkpointing or ZeRO choice fixes these: count them all at once
                for reason in problems:
                    if rejected is not None:
                        rejected.add(reason, len(CHECKPOINTING) * len(zeros))
                continue
            shards = shard_choices(base, gpus_per_node)
            for mode in CHECKPOINTING:
                for zero in zeros:
                    for shard in shards if zero else (0,):
                        yield replace(base, checkpointing=mode, zero_stage=zero, dp_shard=shard)


@dataclass
class Ranking:
    plans: list[Plan]  # valid layouts that fit, fastest first
    rejected: Rejections  # reason kind -> count, with each kind's numbers
    examined: int

    def best_per_mesh(self) -> list[Plan]:
        """The fastest plan of each (tp, pp, cp, dp), fastest first: the ranking of device meshes."""
        seen, best = set(), []
        for plan in self.plans:
            key = (plan.layout.tp, plan.layout.pp, plan.layout.cp, plan.layout.dp)
            if key not in seen:
                seen.add(key)
                best.append(plan)
        return best

    def position(self, **match) -> int | None:
        """1-based rank of the first plan whose layout has all the given fields, or None."""
        for i, plan in enumerate(self.plans, 1):
            if all(getattr(plan.layout, k) == v for k, v in match.items()):
                return i
        return None


def rank_layouts(config: Config, hardware: Hardware, gpus: int, gpus_per_node: int, flash_attention: bool = False,
                 grad_dtype: str = "param", max_cp: int | None = None, hybrid: bool = True) -> Ranking:
    """All valid layouts that fit in memory, by predicted step time (then memory); rejections counted.
    `max_cp` bounds context parallelism (1: none); `hybrid` False leaves hybrid sharding out."""
    plans, rejected, examined, totals = [], Rejections(), 0, {}
    shard_node = gpus_per_node if hybrid else None
    for layout in candidate_layouts(config, gpus, rejected, grad_dtype, shard_node, max_cp):
        examined += 1
        plan = evaluate(config, layout, hardware, gpus, gpus_per_node, flash_attention, False, totals)
        if plan.ok:
            plans.append(plan)
        else:
            for reason in plan.reasons:
                rejected.add(reason)
    plans.sort(key=lambda p: (p.time.total, p.memory.total))
    return Ranking(plans=plans, rejected=rejected, examined=examined)
