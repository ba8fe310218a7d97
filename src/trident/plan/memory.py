"""Per-GPU memory of a parallel layout: weights, gradients, optimizer state, activations, buffers.

Pure arithmetic on the config (no torch): the planner can size a 530B model on a laptop. Every figure
is bytes on one GPU of the worst pipeline stage. Two programs are modelled: trident's trainer (the
default of `trident plan`, `flash_attention=True`: plan/trainer_activations.py, tensor by tensor as its autograd graph keeps
them, on CUDA or on the CPU) and Megatron-LM as MT-NLG ran it (`trident plan --paper`), whose
activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models"), written per tensor so that the element size and dropout masks change them as they change
that program.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

from trident.config import Config
from trident.config.pipeline_schedules import DEFAULT_SCHEDULE, spec
from trident.parallel.layout_rules import sequence_split, stage_layer_counts, zero_in_effect
from trident.plan import trainer_activations as trainer_acts
from trident.plan.zero_buffers import flat_elements, gathered_bytes, staging_bytes

CHECKPOINTING = ("none", "selective", "full")
# Adam moments m and v in fp32; with 16-bit training an fp32 master copy of the weights as well.
ADAM_MOMENT_BYTES = 8
MASTER_BYTES = 4
# Micro-batches of slack the overlapped pipeline contract gives 1F1B and zero-bubble schedules
# (parallel/pipeline/overlap.py's OVERLAPPED_EXTRA_WARMUP; the planner stays below parallel/).
OVERLAPPED_SLACK = 1


@dataclass(frozen=True)
class Layout:
    """One way to place the model on `tp * pp * cp * dp` devices, with the knobs that change its cost."""
    tp: int
    pp: int
    dp: int
    micro_batch: int
    virtual_stages: int = 1
    checkpointing: str = "none"
    zero_stage: int = 0
    sequence_parallel: bool = False
    schedule: str = DEFAULT_SCHEDULE
    # Gradient accumulation dtype. "param": the training precision (docs/reference.md's 16 bytes/param with
    # bf16: 2 weights + 2 grads + 12 fp32 master, m, v); "fp32": an fp32 main-grad buffer, as
    # Megatron-LM and trident's trainer (parallel/data.py) keep: 18 bytes/param.
    grad_dtype: str = "param"
    cp: int = 1  # context parallelism: each sequence split over cp ranks (ring attention)
    dp_shard: int = 0  # hybrid sharding: ZeRO over groups of dp_shard gradient-group ranks; 0: all dp x cp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def gradient_group(self) -> int:
        """Ranks holding the same parameters and reducing their gradients together: dp x cp."""
        return self.dp * self.cp

    @property
    def shard(self) -> int:
        """Ranks ZeRO shards the state over (K): dp_shard, or the whole gradient group."""
        return self.dp_shard or self.gradient_group

    @property
    def replicas(self) -> int:
        """Copies of each ZeRO shard (hybrid sharding all-reduces the owned slices across them)."""
        return self.gradient_group // self.shard

    def local_seq(self, seq_length: int) -> int:
        """Tokens of each sequence one rank holds: seq_length / cp."""
        return seq_length // self.cp

    @property
    def sequence_split(self) -> int:
        """The activations' sequence split under sequence parallelism, as the trainer's RankLayout has it."""
        return sequence_split(self.tp, self.sequence_parallel)

    @property
    def zero_effective(self) -> int:
        """The ZeRO stage in effect (the one asked for, 0 with one replica), as the trainer's RankLayout has it."""
        return zero_in_effect(self.zero_stage, self.gradient_group)

    @property
    def zero(self) -> bool:
        """The optimizer state is sharded (ZeRO stage 1 or higher in effect)."""
        return self.zero_effective >= 1

    def label(self) -> str:
        extra = f" v{self.virtual_stages}" if self.virtual_stages > 1 else ""
        sp = "+sp" if self.sequence_parallel else ""
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        shard = f" shard{self.shard}" if self.zero_effective and self.replicas > 1 else ""
        return (f"tp{self.tp}{sp} pp{self.pp}{cp} dp{self.dp} mb{self.micro_batch}{extra} "
                f"ckpt={self.checkpointing} zero{self.zero_stage}{shard}")

    @classmethod
    def from_config(cls, config: Config, gpus: int, grad_dtype: str = "param") -> "Layout":
        """The layout the config asks for on `gpus` devices (dp = gpus / (tp * pp * cp) unless set)."""
        p, t = config.parallel, config.train
        dp = p.dp or max(gpus // (p.tp * p.pp * p.cp), 1)
        return cls(tp=p.tp, pp=p.pp, dp=dp, micro_batch=t.micro_batch_size, virtual_stages=p.virtual_stages,
                   checkpointing=t.activation_checkpointing, zero_stage=p.zero_stage,
                   sequence_parallel=p.sequence_parallel, schedule=p.schedule, grad_dtype=grad_dtype,
                   cp=p.cp, dp_shard=p.dp_shard)


@dataclass
class MemoryBreakdown:
    """Bytes on one GPU of `stage` (the stage that needs the most)."""
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    buffers: float  # p2p_buffers + reduce_buffers
    stage: int
    in_flight: float  # micro-batches (x chunks, for interleaving) whose activations are held at once
    params: float  # parameters held by this GPU
    optimizer_unsharded: float = 0.0  # what the optimizer state would take without ZeRO
    p2p_buffers: float = 0.0  # pipeline send/receive buffers: live while micro-batches run
    reduce_buffers: float = 0.0  # gradient reduction buffers: live after backward, while gradients reduce
    # trident's trainer reduces its fp32 buffer after the backward that fills it (a bucket starts once its
    # gradients are final, as the pipeline drains): its reduction buffers and the activation peak are not
    # live together. DeepSpeed-style buckets (the paper's program) reduce during the backward.
    reduction_after_backward: bool = False
    staging: float = 0.0  # ZeRO-2/3: fp32 gradient buckets staged and in flight during the backward
    gathered: float = 0.0  # ZeRO-3: all-gathered weights (a chunk's root, a block, the next block's)

    @property
    def total(self) -> float:
        static = self.weights + self.gradients + self.optimizer
        running = self.activations + self.logits + self.p2p_buffers + self.staging + self.gathered
        if self.reduction_after_backward:
            return static + max(running, self.reduce_buffers)
        return static + running + self.reduce_buffers

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def element_bytes(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def state_bytes(precision: str, grad_dtype: str = "param") -> tuple[int, int, int]:
    """Bytes per parameter of (weights, gradients, optimizer state): Adam m and v in fp32, plus an
    fp32 master copy when the weights are 16-bit."""
    if precision == "fp32":
        return 4, 4, ADAM_MOMENT_BYTES
    e = element_bytes(precision)
    return e, 4 if grad_dtype == "fp32" else e, ADAM_MOMENT_BYTES + MASTER_BYTES


def micro_batches(config: Config, layout: Layout) -> int:
    """Micro-batches per replica per step at the full global batch (ramp-up is ignored: plan for steady state)."""
    return config.train.global_batch_size // (layout.micro_batch * layout.dp)


def stage_layers(config: Config, layout: Layout) -> tuple[int, ...]:
    """Transformer layers on each pipeline rank, split as the trainer splits them."""
    partition = config.parallel.layer_partition
    return stage_layer_counts(config.model.num_layers, layout.pp, layout.virtual_stages,
                              tuple(partition) if partition else None)


def layer_params(config: Config, tp: int) -> float:
    """Parameters of one transformer layer held by one TP rank (row-parallel biases and norms
    replicated; key/value heads too when fewer than tp, parallel/kv_heads.py)."""
    m = config.model
    h, f = m.hidden_size, m.ffn_size
    kv = 2 * m.kv_heads * m.head_dim  # key and value rows
    mats, bias = (3 if m.mlp == "swiglu" else 2), (1 if m.bias else 0)
    kv_params = kv * h + bias * kv
    kv_sharded = m.kv_heads % tp == 0
    # q and proj weights, the MLP's matrices; q and fc1 (and gate) biases; kv when sharded
    split = (2 * h * h + mats * h * f + bias * (h + (mats - 1) * f) + (kv_params if kv_sharded else 0)) / tp
    norm = h * (2 if m.norm == "layernorm" and m.bias else 1)  # weight (+ bias)
    replicated = 2 * norm + bias * 2 * h + (0 if kv_sharded else kv_params)  # two norms; proj and fc2 biases
    return split + replicated


def stage_params(config: Config, layout: Layout, stage: int) -> float:
    """Parameters on one GPU of pipeline rank `stage`: its layers plus embedding (first) and head (last)."""
    m = config.model
    h, vocab = m.hidden_size, m.padded_vocab_size(layout.tp)
    params = stage_layers(config, layout)[stage] * layer_params(config, layout.tp)
    if stage == 0:
        params += vocab * h / layout.tp  # word embedding (vocab-parallel)
        params += m.seq_length * h if m.position == "learned" else 0  # position table (rope has none)
    if stage == layout.pp - 1:
        params += h * (2 if m.norm == "layernorm" and m.bias else 1)  # final norm
        if layout.pp > 1 or not m.tie_embeddings:
            params += vocab * h / layout.tp  # the untied head, or the last stage's copy of the tied embedding
    return params


def layer_activation_bytes(config: Config, layout: Layout, mode: str, flash_attention: bool = False) -> float:
    """Activation bytes one layer of Megatron-LM's program keeps for backward, per micro-batch, on one
    TP rank (trident's trainer: trainer_activations.layer_bytes).

    none: every tensor backward needs (Korthikanti's 34 sbh + 5 a s^2 b for bf16 with dropout);
    selective: the attention core (scores, softmax, dropout) is recomputed, so its s^2 terms go;
    full: only the block input is kept.
    """
    m, t = config.model, layout.tp
    s, b, h, a, f = layout.local_seq(m.seq_length), layout.micro_batch, m.hidden_size, m.num_heads, m.ffn_size
    e = element_bytes(config.train.precision)
    sbh = s * b * h
    # Replicated across TP ranks unless sequence parallelism splits them along the sequence.
    shared = layout.sequence_split
    if mode == "full":
        return e * sbh / shared
    hidden_masks = 2 * (1 if m.hidden_dropout > 0 else 0)  # two dropout masks, one byte an element
    norm = e if m.norm == "layernorm" else 4 + e  # RMSNorm keeps its fp32 input and its normalised output
    replicated = (2 * norm + 2 * e + hidden_masks) * sbh / shared  # two norm inputs, QKV and fc1 inputs, masks
    qkv = 1 + 2 * max(m.kv_heads, t) / m.num_heads  # Q; K, V of fewer heads (GQA), one a rank when replicated
    mlp = 4 if m.mlp == "swiglu" else 2  # SwiGLU: gate, silu(gate), up, their product; GeLU: input and output
    split = (e * (qkv + 1) * sbh + mlp * e * s * b * f) / t  # Q, K, V, proj input; the MLP's (ffn wide)
    if flash_attention:
        core = 4 * a * s * b / t  # only the fp32 log-sum-exp per row survives
    else:
        dropout = (e + 1) if m.attention_dropout > 0 else 0  # dropout mask + dropped probabilities
        core = (e + dropout) * a * s * s * b / t  # softmax output
    if mode == "selective":
        core = 4 * a * s * b / t if flash_attention else 0.0
    return replicated + split + core


def in_flight(layout: Layout, stage: int, micro: int, contract: str = "batched") -> float:
    """Micro-batches whose activations stage `stage` holds at the peak, counted in whole-stage units.

    The schedule's record says (config.pipeline_schedules.ScheduleSpec.in_flight): GPipe all of them;
    1F1B and ZB-H1 pp - stage (Narayanan et al. 2021); ZB-H2 2 pp - 1 - stage (pipeline.zero_bubble);
    interleaved 1F1B Megatron's warm-up plus the one in flight, each 1/v of the stage. That is the
    `batched` contract NCCL runs; under the `overlapped` one (gloo, and a rehearsal's fake process
    group) 1F1B holds one more on every stage but the last and the zero-bubble schedules one more on
    every stage (pipeline.overlap.schedule_for's slack).
    """
    rules = spec(layout.schedule)
    held = rules.in_flight(layout.pp, stage, micro, layout.virtual_stages)
    if contract != "overlapped" or layout.pp == 1 or rules.interleaved or rules.holds_every_micro_batch:
        return held
    if rules.splits_weight_grads or stage < layout.pp - 1:
        return float(min(held + OVERLAPPED_SLACK, micro))
    return held


def stage_memory(config: Config, layout: Layout, stage: int, flash_attention: bool = False,
                 device: str = "cuda") -> MemoryBreakdown:
    """Memory on one GPU of pipeline rank `stage`. `flash_attention`: the program of trident's trainer
    (SDPA attention and what its autograd graph keeps) on `device`, "cuda" or "cpu" (autocast differs);
    without it, Megatron-LM's as the paper ran it (math attention keeping the s x s scores)."""
    t, p = config.train, layout
    params = stage_params(config, layout, stage)
    # trident's flat buffers hold the parameters and each bucket's padding; the paper's count is per parameter
    flat = flat_elements(config, layout, stage) if flash_attention else params
    weight_b, grad_b, state_b = state_bytes(t.precision, layout.grad_dtype)
    stage_in_effect = p.zero_effective
    weights, gradients, optimizer_full = flat * weight_b, flat * grad_b, flat * state_b
    # ZeRO shards over K = p.shard ranks (dp x cp, or dp_shard's groups under hybrid sharding)
    optimizer = optimizer_full / p.shard if p.zero else optimizer_full
    weights /= p.shard if stage_in_effect == 3 else 1  # ZeRO-3: the owned slice of the weights only
    gradients /= p.shard if stage_in_effect >= 2 else 1  # ZeRO-2/3: the owned slice of the gradients only
    # trident's pipeline runs batched exchanges on NCCL, overlapped ones on gloo (the CPU)
    contract = "overlapped" if flash_attention and device == "cpu" else "batched"
    flight = in_flight(layout, stage, micro_batches(config, layout), contract)
    def activations_at(held: float) -> tuple[float, float]:  # (activations, logits) with `held` micro-batches
        if flash_attention:
            return trainer_activation_bytes(config, layout, stage, held, device)
        return paper_activation_bytes(config, layout, stage, held)

    activations, logits = activations_at(flight)
    e = element_bytes(t.precision)
    sbh = p.local_seq(config.model.seq_length) * p.micro_batch * config.model.hidden_size
    # send + receive buffers, activations forward and gradients backward
    p2p = 4 * e * sbh / p.sequence_split if p.pp > 1 else 0.0
    reduce = 0.0
    if p.gradient_group > 1 and p.grad_dtype == "param":
        # Separate reduce buckets, two in flight (DeepSpeed style). An fp32 main-grad buffer (Megatron,
        # trident) is all-reduced in place: its buckets are views, no extra memory.
        reduce = 2 * min(config.parallel.bucket_size_mb * 2**20, gradients)
    elif p.zero:
        # trident's ZeRO-1 reduce-scatter writes each bucket's 1/dp to a separate output (gloo must not
        # alias input and output), and every bucket is in flight at once: 1/K of the gradients.
        reduce = gradients / p.shard
    staging = gathered = 0.0
    if stage_in_effect >= 2:  # the staged buckets; after the backward, those still in flight (and stage
        # 2's owned weight slices copied for the all-gather after the update)
        staging, reduce = staging_bytes(config, layout, stage, micro_batches(config, layout), flight,
                                        lambda held: sum(activations_at(held)))
        reduce = max(reduce, flat * weight_b / p.shard if stage_in_effect == 2 else 0.0)
    if stage_in_effect == 3:
        gathered = gathered_bytes(config, layout, stage, weight_b)
    return MemoryBreakdown(weights=weights, gradients=gradients, optimizer=optimizer, activations=activations,
                           logits=logits, buffers=p2p + reduce, stage=stage, in_flight=flight, params=params,
                           optimizer_unsharded=optimizer_full, p2p_buffers=p2p, reduce_buffers=reduce,
                           reduction_after_backward=flash_attention and p.grad_dtype == "fp32",
                           staging=staging, gathered=gathered)


def paper_activation_bytes(config: Config, layout: Layout, stage: int, flight: float) -> tuple[float, float]:
    """(activations, logits) of Megatron-LM's program: Korthikanti's per-layer tensors times the
    micro-batches in flight, one recomputed layer's working set with full checkpointing, and on the
    last stage the logits plus the fp32 copy the loss keeps."""
    m, p = config.model, layout
    e = element_bytes(config.train.precision)
    s = p.local_seq(m.seq_length)
    sbh = s * p.micro_batch * m.hidden_size
    sp = p.sequence_split
    stored = stage_layers(config, layout)[stage] * layer_activation_bytes(config, layout, p.checkpointing) * flight
    if p.checkpointing == "full":
        # Backward recomputes one layer at a time: its full working set exists once, beside the checkpoints.
        stored += layer_activation_bytes(config, layout, "none")
    logits = 0.0
    if stage == p.pp - 1:
        stored += e * sbh / sp  # final LayerNorm input
        logits = s * p.micro_batch * m.padded_vocab_size(p.tp) / p.tp * (e + 4)
    return stored, logits


def trainer_activation_bytes(config: Config, layout: Layout, stage: int, flight: float,
                             device: str) -> tuple[float, float]:
    """(activations, logits) of trident's trainer at its forward/backward peak: what every micro-batch
    in flight keeps, plus the largest momentary working set (a layer's backward, or the loss on the
    last stage); `logits` is the loss's share: its kept probabilities and what its working set needs
    beyond a layer's backward (so the two add up to the peak)."""
    p, mode = layout, layout.checkpointing
    x = trainer_acts.shape(config, layout, device)
    kept = stage_layers(config, layout)[stage] * trainer_acts.layer_bytes(config, x, mode) * flight
    if device == "cuda" and mode != "full" and p.pp > 1:
        # the executor keeps each received chunk input for its gradient, while LayerNorm saves an fp32 copy
        receiving = 1.0 if stage > 0 else (p.virtual_stages - 1) / p.virtual_stages
        kept += x.e * x.sbh / x.sp * flight * p.virtual_stages * receiving
    if stage == 0:
        kept += trainer_acts.first_stage_extra(x, mode) * flight
    working = trainer_acts.backward_working_set(config, x, mode)
    if stage != p.pp - 1:
        return kept + working, 0.0
    probabilities = trainer_acts.FP32 * x.s * x.b * x.vocab / x.tp
    loss_flight = flight if p.virtual_stages == 1 else 1.0  # an interleaved last chunk runs B right after F
    kept += (trainer_acts.last_stage_kept(x) - probabilities) * loss_flight
    # a layer's backward starts once this micro-batch's probabilities are freed
    peak_working = max(trainer_acts.loss_working_set(x), working - probabilities)
    return kept + working, probabilities * loss_flight + peak_working - working


def distinct_stages(config: Config, layout: Layout) -> dict[int, int]:
    """One representative pipeline rank per kind of stage -> how many ranks are of that kind.

    Ranks with the same layer count that are neither first nor last cost the same, so the model
    evaluates each kind once (a 105-stage pipeline has at most four kinds by default)."""
    return dict(_distinct(stage_layers(config, layout)))  # a copy: the cached one must not change


@lru_cache(maxsize=4096)
def _distinct(layers: tuple[int, ...]) -> dict[int, int]:
    kinds: dict[tuple, int] = {}
    counts: dict[int, int] = {}
    for stage, count in enumerate(layers):
        first = kinds.setdefault((count, stage == 0, stage == len(layers) - 1), stage)
        counts[first] = counts.get(first, 0) + 1
    return counts


def memory_per_gpu(config: Config, layout: Layout, flash_attention: bool = False,
                   device: str = "cuda") -> MemoryBreakdown:
    """The worst stage's memory: what must fit on every GPU (arguments as stage_memory's)."""
    # Within a kind, the earliest rank holds the most micro-batches in flight: it is the one to check.
    stages = [stage_memory(config, layout, i, flash_attention, device)
              for i in distinct_stages(config, layout)]
    return max(stages, key=lambda s: s.total)
