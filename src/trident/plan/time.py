"""Step time of a parallel layout on a hardware profile (trident.hardware): compute, TP collectives,
pipeline p2p and bubble, data-parallel reduction, optimizer. Pure arithmetic.

Model (docs/planner.md): a pipeline rank spends per micro-batch
    t_stage = FLOPs / (peak * efficiency) + TP all-reduces + p2p sends,
the pipeline takes m * max(t_stage) + (sum(t_stage) - max(t_stage)) / v (fill and drain: the bubble,
(pp - 1) / (m v) of the work for equal stages), then the data-parallel gradient reduction and the
optimizer step follow (DeepSpeed's and Megatron's 2021 pipeline engines did not overlap them).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from trident import flops
from trident.config import Config
from trident.hardware import Hardware
from trident.parallel.layout_rules import dp_bytes_per_step
from trident.plan.memory import (ADAM_MOMENT_BYTES, Layout, distinct_stages, element_bytes, micro_batches,
                                 stage_layers, stage_params, state_bytes)
from trident.plan.ring import ring_cost


def per_device(hardware: Hardware, gpus: int, gpus_per_node: int) -> Hardware:
    """On a shared host the processes of a node split its cores and memory evenly."""
    if not hardware.shared_host:
        return hardware
    ranks = max(min(gpus, gpus_per_node), 1)
    share = {f.name: getattr(hardware, f.name) for f in fields(Hardware)}
    share.update(peak_tflops=hardware.peak_tflops / ranks, fp32_peak_tflops=hardware.fp32_peak_tflops / ranks,
                 memory_gib=(hardware.memory_gib - hardware.reserved_gib * ranks) / ranks + hardware.reserved_gib)
    return Hardware(**share)


# ---------------------------------------------------------------------------------------------- FLOPs

def layer_forward_flops(config: Config, micro_batch: int) -> float:
    """Forward FLOPs of one transformer layer for one micro-batch: 2 b s W + 4 b s^2 h (W: its matmul
    weights, flops.block_weights; 24 b s h^2 for GPT's ffn = 4h)."""
    m = config.model
    s, h = m.seq_length, m.hidden_size
    matmuls = 2 * micro_batch * s * flops.block_weights(m)  # QKV + proj, the MLP's two (SwiGLU: three)
    attention = 4 * micro_batch * s * s * h  # scores and the weighted sum of values
    return matmuls + attention


def head_forward_flops(config: Config, micro_batch: int) -> float:
    m = config.model
    return 2 * micro_batch * m.seq_length * m.hidden_size * m.padded_vocab_size(1)


def recompute_flops(config: Config, micro_batch: int, mode: str) -> float:
    """Extra forward FLOPs per layer that activation checkpointing re-runs in backward."""
    if mode == "full":
        return layer_forward_flops(config, micro_batch)
    if mode == "selective":
        m = config.model
        return 4 * micro_batch * m.seq_length**2 * m.hidden_size
    return 0.0


def iteration_flops(config: Config, recompute: bool = True) -> float:
    """trident.flops' formula for one global batch of `config` (the vocabulary padded as at tp=1).

    This is the convention the paper's TFLOP/s use, whatever the layout actually recomputes.
    """
    m = config.model
    return flops.iteration_flops(config.train.global_batch_size, m.seq_length, m.num_layers, m.hidden_size,
                                 m.padded_vocab_size(1), recompute, flops.block_weights(m))


# ------------------------------------------------------------------------------------- communication

def ring_time(nbytes: float, ranks: int, busbw_gbs: float, latency_us: float, factor: float = 2.0) -> float:
    """Seconds for a ring collective: factor (n-1)/n * bytes / busbw + one latency per hop.
    factor 2: all-reduce; 1: reduce-scatter or all-gather."""
    if ranks <= 1:
        return 0.0
    hops = factor * (ranks - 1)
    return factor * (ranks - 1) / ranks * nbytes / (busbw_gbs * 1e9) + hops * latency_us * 1e-6


def link(hardware: Hardware, span: int, gpus_per_node: int) -> tuple[float, float]:
    """(busbw GB/s, latency us) for a group whose ranks spread over `span` consecutive ranks.

    Ranks are laid out dp x pp x cp x tp with TP innermost (parallel/mesh.py): a group stays inside one
    node when its span fits a node; otherwise its ring crosses the inter-node fabric, the slowest hop.
    """
    if span <= gpus_per_node:
        return hardware.intra_node_busbw_gbs, hardware.intra_node_latency_us
    return hardware.inter_node_busbw_gbs, hardware.inter_node_latency_us


@dataclass
class TimeBreakdown:
    """Seconds of one optimizer step (one global batch), and the rates that follow from it."""
    compute: float  # forward + backward math of the slowest stage, all micro-batches
    recompute: float  # of which activation recomputation
    tp_comm: float
    pp_comm: float
    bubble: float  # pipeline fill and drain
    dp_comm: float  # gradient reduction (+ parameter all-gather with ZeRO-1), tied-embedding sync
    optimizer: float
    micro_batches: int
    bubble_fraction: float
    tflops_per_gpu: float = 0.0  # paper convention: F with recompute / (gpus * step time)
    mfu: float = 0.0  # model FLOPs (no recompute) / (gpus * step time * peak)
    slowest_stage: int = 0
    cp_comm: float = 0.0  # context parallelism's ring exchanges not hidden by the attention compute
    cp_bytes: float = 0.0  # bytes one rank of the slowest stage sends around its CP ring per step

    @property
    def total(self) -> float:
        return (self.compute + self.tp_comm + self.pp_comm + self.cp_comm + self.bubble + self.dp_comm
                + self.optimizer)

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def stage_seconds(config: Config, layout: Layout, hardware: Hardware, gpus_per_node: int, stage: int) -> dict:
    """Per-micro-batch seconds of one pipeline rank, by component."""
    m, b = config.model, layout.micro_batch
    speed = hardware.peak(config.train.precision) * hardware.sustained_efficiency
    layers = stage_layers(config, layout)[stage]
    forward = layers * layer_forward_flops(config, b)
    recompute = layers * recompute_flops(config, b, layout.checkpointing)
    if stage == layout.pp - 1:
        forward += head_forward_flops(config, b)
    # forward + backward (twice the forward); a CP rank computes 1/cp of every sequence (balanced chunks)
    compute = 3 * forward / (layout.tp * layout.cp) / speed
    recompute_s = recompute / (layout.tp * layout.cp) / speed

    e = element_bytes(config.train.precision)
    act_bytes = e * layout.local_seq(m.seq_length) * b * m.hidden_size
    bw, lat = link(hardware, layout.tp, gpus_per_node)
    # Megatron TP: two all-reduces forward and two backward per layer, two more when the layer is re-run.
    # (Sequence parallelism turns each into a reduce-scatter + all-gather: the same bytes on the wire.)
    collectives = layers * (4 + (2 if layout.checkpointing == "full" else 0))
    collectives += (stage == 0) + (stage == layout.pp - 1)  # vocab-parallel embedding and head
    tp = collectives * ring_time(act_bytes, layout.tp, bw, lat) * (1 - hardware.tp_overlap)

    pp = 0.0
    if layout.pp > 1:
        sent = act_bytes / layout.sequence_split
        bw, lat = link(hardware, layout.tp * layout.cp * layout.pp, gpus_per_node)
        # Activations forward and gradients backward, once per model chunk the micro-batch passes here.
        pp = 2 * layout.virtual_stages * (sent / (bw * 1e9) + lat * 1e-6) * (1 - hardware.pp_overlap)
    bw, lat = link(hardware, layout.tp * layout.cp, gpus_per_node)  # a CP ring: cp ranks tp apart
    ring = ring_cost(config, layout, e, speed, bw, lat)
    return {"compute": compute + recompute_s, "recompute": recompute_s, "tp": tp, "pp": pp,
            "cp": layers * ring.exposed_s, "cp_bytes": layers * (ring.forward_bytes + ring.backward_bytes)}


def shard_span(layout: Layout) -> int:
    """Consecutive ranks a ZeRO shard group spans: its K members are consecutive in the gradient group
    (dp-major, cp-minor; parallel/hybrid.py), CP members tp apart, DP members pp x cp x tp apart."""
    k = layout.shard
    return k * layout.tp if k <= layout.cp else k // layout.cp * layout.pp * layout.cp * layout.tp


def gradient_sync_seconds(config: Config, layout: Layout, hardware: Hardware, gpus_per_node: int) -> float:
    """Data-parallel traffic of the largest stage over the gradient group (dp x cp ranks;
    layout_rules.dp_bytes_per_step: the gradients' reduction, and with ZeRO the weights' all-gathers; a
    reduce-scatter per micro-batch from stage 2, two all-gathers per micro-batch at stage 3), plus the
    tied-embedding all-reduce. Hybrid sharding (K < dp x cp): the ZeRO collectives inside the shard
    group (its own link: a node's when it spans one), the owned 1/K all-reduced across the replicas."""
    weight_b, grad_b, _ = state_bytes(config.train.precision, layout.grad_dtype)
    params = round(max(stage_params(config, layout, i) for i in distinct_stages(config, layout)))
    stage, micro, group = layout.zero_effective, micro_batches(config, layout), layout.gradient_group
    rings = {0: 2, 1: 1, 2: micro, 3: 3 * micro}[stage]  # rings of K - 1 hops, one latency each (as ring_time)
    seconds = 0.0
    if group > 1:
        k = layout.shard if stage else group
        inside = dp_bytes_per_step(stage, k, params, weight_b, micro, grad_b)
        bw, lat = link(hardware, shard_span(layout) if stage else layout.gpus, gpus_per_node)
        seconds = inside / (bw * 1e9) + rings * (k - 1) * lat * 1e-6
        if stage and k < group:  # the replicas' all-reduce of the owned slices, across the cluster
            across = dp_bytes_per_step(stage, group, params, weight_b, micro, grad_b, shard=k) - inside
            bw, lat = link(hardware, layout.gpus, gpus_per_node)
            seconds += across / (bw * 1e9) + 2 * (group // k - 1) * lat * 1e-6
    seconds *= 1 - hardware.dp_overlap
    if layout.pp > 1:  # first and last stage add their copies of the tied word embedding
        embedding = config.model.padded_vocab_size(layout.tp) * config.model.hidden_size / layout.tp * grad_b
        bw, lat = link(hardware, layout.tp * layout.cp * layout.pp, gpus_per_node)
        seconds += ring_time(embedding, 2, bw, lat)
    return seconds


def optimizer_seconds(config: Config, layout: Layout, hardware: Hardware) -> float:
    """Adam is bandwidth-bound: read gradient and state, write state and weights (per owned parameter)."""
    weight_b, grad_b, state_b = state_bytes(config.train.precision, layout.grad_dtype)
    params = max(stage_params(config, layout, i) for i in distinct_stages(config, layout))
    owned = params / layout.shard if layout.zero else params
    per_param = grad_b + 2 * state_b + weight_b * (1 if state_b > ADAM_MOMENT_BYTES else 2)  # fp32: w read too
    return owned * per_param / (hardware.hbm_gbs * 1e9)


def step_time(config: Config, layout: Layout, hardware: Hardware, gpus_per_node: int) -> TimeBreakdown:
    """Seconds of one step at the full global batch, broken down; `hardware` is per device."""
    micro = micro_batches(config, layout)
    kinds = distinct_stages(config, layout)  # representative rank -> ranks like it
    stages = {i: stage_seconds(config, layout, hardware, gpus_per_node, i) for i in kinds}
    per_stage = {i: s["compute"] + s["tp"] + s["pp"] + s["cp"] for i, s in stages.items()}
    slowest = max(per_stage, key=lambda i: per_stage[i])
    worst = stages[slowest]
    total = sum(per_stage[i] * count for i, count in kinds.items())
    bubble = (total - per_stage[slowest]) / layout.virtual_stages
    breakdown = TimeBreakdown(
        compute=micro * worst["compute"], recompute=micro * worst["recompute"], tp_comm=micro * worst["tp"],
        pp_comm=micro * worst["pp"], cp_comm=micro * worst["cp"], cp_bytes=micro * worst["cp_bytes"], bubble=bubble,
        dp_comm=gradient_sync_seconds(config, layout, hardware, gpus_per_node),
        optimizer=optimizer_seconds(config, layout, hardware), micro_batches=micro,
        bubble_fraction=bubble / (micro * per_stage[slowest]), slowest_stage=slowest)
    gpus = layout.gpus
    breakdown.tflops_per_gpu = iteration_flops(config) / (gpus * breakdown.total) / 1e12
    peak = hardware.peak(config.train.precision)
    breakdown.mfu = iteration_flops(config, recompute=False) / (gpus * breakdown.total) / peak
    return breakdown


def calibrate_efficiency(config: Config, layout: Layout, hardware: Hardware, gpus_per_node: int,
                         measured_step_s: float) -> float:
    """The sustained_efficiency that makes the predicted step time equal `measured_step_s`.

    Only the compute terms scale with 1/efficiency (the bubble holds compute too), so the step time is
    C / efficiency + K; two evaluations give C and K.
    """
    probe = Hardware(**{**{f.name: getattr(hardware, f.name) for f in fields(Hardware)}, "sustained_efficiency": 1.0})
    at_one = step_time(config, layout, probe, gpus_per_node).total
    probe.sustained_efficiency = 0.5
    scaled = step_time(config, layout, probe, gpus_per_node).total - at_one  # C (1/0.5 - 1/1) = C
    fixed = at_one - scaled
    if measured_step_s <= fixed:
        raise ValueError(f"measured {measured_step_s:.3f} s is below the non-compute time {fixed:.3f} s")
    return scaled / (measured_step_s - fixed)
