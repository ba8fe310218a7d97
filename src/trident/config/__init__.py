"""Typed run configuration: dataclasses filled from a YAML file plus dotted `key=value` overrides.

Unknown keys, wrong types and impossible combinations raise ConfigError naming the key, at start.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from trident.config.eval_section import EvalConfig, eval_problem
from trident.config.model import MODEL_CHOICES, ModelConfig, model_problems
from trident.config.pipeline_schedules import DEFAULT_SCHEDULE, SPECS, Problem, spec
from trident.config.suggest import did_you_mean
# the typed-file machinery every config shares (curation pipelines and flow files too); re-exported here
from trident.config.typed import PRESET_DIR, ConfigError, fill, parse_overrides, read_yaml, resolve_path  # noqa: F401


@dataclass
class ParallelConfig:
    tp: int = 1
    pp: int = 1
    dp: int = 0  # 0: world_size / (tp * pp)
    virtual_stages: int = 1
    schedule: str = DEFAULT_SCHEDULE  # one of pipeline_schedules.SPECS
    zero_stage: int = 0
    sequence_parallel: bool = False
    cp: int = 1  # context parallelism: each sequence split over cp ranks (ring attention)
    dp_shard: int = 0  # ZeRO 1-3 shard over groups of dp_shard ranks of dp x cp, replicated across them; 0: all
    bucket_size_mb: float = 25.0
    overlap_grad_reduce: bool = True  # start each DP bucket's reduction once its gradients are final
    layer_partition: Optional[list] = None  # layers per (virtual) stage; None: balanced
    backend: str = "auto"  # auto | gloo | nccl
    timeout_s: int = 600  # a rank that waits this long on a dead or hung peer exits with an error
    allow_tp_across_hosts: bool = False  # a TP group spanning hosts is refused at start unless this is set


@dataclass
class DataConfig:
    paths: list = field(default_factory=list)  # prefixes, or [weight, prefix, weight, prefix, ...]
    tokenizer: str = ""
    valid_fraction: float = 0.02  # fraction of documents held out (MT-NLG: 98/2)
    cache_dir: str = ""  # "": next to the data
    split_seed: int = 1234
    index_workers: int = 0  # processes rank 0 builds the index cache with; 0: one per source (big data)


@dataclass
class TrainConfig:
    steps: int = 100
    global_batch_size: int = 8
    micro_batch_size: int = 2
    lr: float = 6e-4
    min_lr: float = 6e-5
    warmup_tokens: int = 0
    decay_tokens: int = 0  # 0: total training tokens
    rampup_batch_size: Optional[list] = None  # [start, increment, over_tokens]
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    seed: int = 1234
    precision: str = "fp32"  # fp32 | bf16 | fp16
    device: str = "auto"  # auto | cpu | cuda
    eval_interval: int = 0  # steps between validation passes; 0: never
    eval_iters: int = 4
    activation_checkpointing: str = "none"  # none | full | selective
    compile: bool = False
    peak_tflops: float = 0.0  # 0: known GPU default, or measured matmul peak on CPU
    threads: int = 0  # torch intra-op threads per process; 0: leave torch's default
    malloc_keep_freed: bool = True  # CPU runs on glibc: reuse freed memory, no page faults each step (train/allocator.py)
    loss_scale_initial: float = 2.0**16
    loss_scale_growth_interval: int = 1000
    loss_scale_backoff: float = 0.5
    loss_scale_hysteresis: int = 2


@dataclass
class CheckpointConfig:
    save_interval: int = 0  # 0: only at the end (and on a stop signal, and by save_interval_minutes)
    save_interval_minutes: float = 30.0  # also save when this long passed since the last save; 0: never
    load: str = ""  # "" | auto | a checkpoint path
    dir: str = ""  # "": OUT/checkpoints
    keep_last: int = 3
    async_save: bool = False


@dataclass
class LoggingConfig:
    log_interval: int = 10
    tensorboard: bool = False  # event files under OUT/tensorboard (needs the tensorboard extra)
    wandb_project: str = ""  # a Weights & Biases project to log to (needs the wandb extra)
    wandb_mode: str = "online"  # online | offline (no network; `wandb sync OUT/wandb/...` later) | disabled
    record_timeline: bool = False
    metrics_upload_s: float = 30.0  # an --out on an object store: seconds between uploads of new metrics lines


@dataclass
class DiagnosticsConfig:
    flight_events: int = 2000  # instructions and collectives each rank keeps for OUT/debug/flight/rank_R.json; 0: off
    straggler_interval: int = 100  # steps between exchanges of per-section times; 0: never
    straggler_pct: float = 10.0  # a rank this much slower than its peers' median compute is a straggler
    straggler_checks: int = 4  # ... only when slow (beyond the noise band) at this many checks in a row
    straggler_min_cost_pct: float = 5.0  # ... and costing the step at least this % of its time at each of them
    weight_check_interval: int = 100  # steps between DP replica digest checks (and before every save); 0: never
    spike_factor: float = 3.0  # a loss above this x the median of the last 20 steps is named; 0: off


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def validate(self, world_size: int | None = None) -> "Config":
        validate(self, world_size)
        return self


CHOICES = {
    **MODEL_CHOICES,
    "parallel.schedule": tuple(SPECS),
    "parallel.zero_stage": (0, 1, 2, 3),
    "parallel.backend": ("auto", "gloo", "nccl"),
    "train.precision": ("fp32", "bf16", "fp16"),
    "train.device": ("auto", "cpu", "cuda"),
    "train.activation_checkpointing": ("none", "full", "selective"),
    "logging.wandb_mode": ("online", "offline", "disabled"),
}

# The range every numeric key must lie in, by meaning; checked before anything divides by them.
RANGES = {
    "positive": ("model.num_layers", "model.hidden_size", "model.num_heads", "model.seq_length",
                 "model.make_vocab_size_divisible_by", "model.layernorm_epsilon", "model.rope_theta",
                 "model.rope_scaling_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
                 "model.rope_original_max_positions",
                 "parallel.tp", "parallel.pp", "parallel.cp",
                 "parallel.virtual_stages", "parallel.bucket_size_mb", "parallel.timeout_s", "train.steps",
                 "train.global_batch_size", "train.micro_batch_size", "train.lr", "train.adam_eps",
                 "train.eval_iters", "train.loss_scale_initial", "train.loss_scale_growth_interval",
                 "train.loss_scale_hysteresis", "logging.log_interval", "logging.metrics_upload_s",
                 "diagnostics.straggler_checks"),
    "non-negative": ("model.vocab_size", "model.ffn_hidden_size", "model.init_std", "model.num_kv_heads",
                     "model.max_positions", "model.sliding_window",
                     "parallel.dp", "parallel.dp_shard",
                     "data.split_seed", "data.index_workers", "train.min_lr", "train.warmup_tokens",
                     "train.decay_tokens",
                     "train.weight_decay", "train.clip_grad", "train.seed", "train.eval_interval",
                     "train.peak_tflops", "train.threads", "checkpoint.save_interval", "checkpoint.keep_last",
                     "checkpoint.save_interval_minutes", "diagnostics.flight_events", "diagnostics.straggler_interval",
                     "diagnostics.straggler_pct", "diagnostics.straggler_min_cost_pct",
                     "diagnostics.weight_check_interval", "diagnostics.spike_factor"),
    "in [0, 1)": ("model.hidden_dropout", "model.attention_dropout", "data.valid_fraction", "train.adam_beta1",
                  "train.adam_beta2"),
    "in (0, 1)": ("train.loss_scale_backoff",),
}
_IN_RANGE = {"positive": lambda v: v > 0, "non-negative": lambda v: v >= 0,
             "in [0, 1)": lambda v: 0 <= v < 1, "in (0, 1)": lambda v: 0 < v < 1}


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    config = Config()
    if path is not None:
        file = resolve_path(path, "training")
        try:
            fill(config, read_yaml(file), "")
        except ConfigError as error:
            raise ConfigError(f"{file}: {error}") from None
    fill(config, parse_overrides(overrides or []), "")
    return config


def given_model_keys(path: str | Path | None, overrides: list[str] | None) -> dict:
    """The model keys the user typed, in a config file of theirs (a preset's are trident's) or an override."""
    given: dict = {}
    if path is not None:
        file = resolve_path(path)
        if isinstance(file, Path) and file.parent != PRESET_DIR:
            given.update(read_yaml(file).get("model") or {})
    given.update(parse_overrides(overrides or []).get("model") or {})
    return given


def config_from_dict(tree: dict) -> Config:
    config = Config()
    fill(config, tree, "")
    return config


def save_config(config: Config, path: str | Path) -> None:
    """The config as YAML at `path`: a local path, or a path object of any filesystem (a UPath)."""
    (Path(path) if isinstance(path, str) else path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"config key '{key}': {message}")


def _refuse(problem: Problem | None, context: str = "") -> None:
    """Raise a pipeline schedule's problem (pipeline_schedules) as a ConfigError naming its key."""
    if problem is not None:
        raise ConfigError(f"config key '{problem.key}': {problem.message}{context}")


def _check_rampup(train: TrainConfig, granule: int) -> None:
    ramp = train.rampup_batch_size
    if ramp is None:
        return
    _require(len(ramp) == 3 and all(isinstance(v, int) and v > 0 for v in ramp),
             "train.rampup_batch_size", f"must be [start, increment, over_tokens] positive ints, got {ramp}")
    start, increment, _ = ramp
    for value, what in ((start, "start"), (increment, "increment")):
        _require(value % granule == 0, "train.rampup_batch_size",
                 f"{what} {value} must be divisible by micro_batch_size x dp = {granule}")
    _require((train.global_batch_size - start) % increment == 0, "train.rampup_batch_size",
             f"global_batch_size - start ({train.global_batch_size} - {start}) must be a multiple of increment {increment}")


def _check_ranges(config: Config) -> None:
    """Every numeric key finite and within RANGES, the message naming that key."""
    for kind, keys in RANGES.items():
        for key in keys:
            section, name = key.split(".")
            value = getattr(getattr(config, section), name)
            _require(math.isfinite(value), key, f"must be a finite number, got {value}")
            _require(_IN_RANGE[kind](value), key, f"must be {kind}, got {value}")
    partition = config.parallel.layer_partition
    if partition is not None:
        _require(all(type(n) is int and n >= 0 for n in partition), "parallel.layer_partition",
                 f"must be a list of non-negative ints (layers per stage), got {partition}")


def _check_context_parallel(config: Config) -> None:
    """parallel.cp: every sequence cuts into 2 x cp equal chunks (each CP rank holds two, and with
    sequence parallelism its seq_length / cp tokens split over tp), and nothing that needs whole
    sequences on one rank (attention dropout's masks, in-training task scoring) is combined with it."""
    m, p = config.model, config.parallel
    if p.cp == 1:
        return
    _require(m.seq_length % (2 * p.cp) == 0, "parallel.cp", f"model.seq_length={m.seq_length} must be divisible by "
             f"2 x cp = {2 * p.cp} (context parallelism cuts each sequence into 2 x cp load-balanced chunks)")
    _require(not p.sequence_parallel or (m.seq_length // p.cp) % p.tp == 0, "parallel.sequence_parallel",
             f"each CP rank's model.seq_length / cp = {m.seq_length // p.cp} tokens must be divisible by "
             f"tp={p.tp} with sequence parallelism (parallel.cp={p.cp})")
    _require(m.attention_dropout == 0, "model.attention_dropout", f"must be 0 with parallel.cp={p.cp}: "
             f"ring attention has no attention dropout, got {m.attention_dropout}")
    _require(not config.eval.tasks, "eval.tasks", f"in-training task scoring needs whole sequences on one rank: "
             f"set parallel.cp=1 (got {p.cp}) or score the checkpoints with `trident eval` (any layout reads them)")


def _check_dp_shard(p: ParallelConfig, dp: int | None) -> None:
    """Hybrid sharding: ZeRO over groups of dp_shard members of the gradient group (dp x cp ranks,
    parallel/hybrid.py), which divide it (when dp is known); dp_shard = dp x cp is plain ZeRO, as 0."""
    group = dp * p.cp if dp else None
    if p.dp_shard == 0 or p.dp_shard == group:
        return
    ranks = f"parallel.dp={dp}" if p.cp == 1 else f"parallel.dp x parallel.cp = {dp} x {p.cp} = {group}"
    _require(group is None or group % p.dp_shard == 0, "parallel.dp_shard", f"{p.dp_shard} does not divide "
             f"{ranks}: ZeRO shards over groups of dp_shard ranks of the gradient group (dp x cp)")
    _require(p.zero_stage >= 1, "parallel.dp_shard", f"{p.dp_shard} shards ZeRO's state, but "
             "parallel.zero_stage=0 shards nothing: set parallel.zero_stage to 1, 2 or 3, or dp_shard to 0")


def validate(config: Config, world_size: int | None = None) -> None:
    """Reject out-of-range values and impossible combinations up front, naming the key."""
    m, p, t = config.model, config.parallel, config.train
    for key, choices in CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        _require(value in choices, key, f"must be one of {choices}, got {value!r}{did_you_mean(value, choices)}")
    _check_ranges(config)
    _require(m.hidden_size % m.num_heads == 0, "model.hidden_size",
             f"{m.hidden_size} is not divisible by model.num_heads={m.num_heads}")
    _require(m.num_heads % p.tp == 0, "parallel.tp", f"model.num_heads={m.num_heads} must be divisible by tp={p.tp}")
    for problem in model_problems(m, p.tp):
        _refuse(problem)
    _require(m.ffn_size % p.tp == 0, "parallel.tp", f"ffn size {m.ffn_size} must be divisible by tp={p.tp}")
    chunks = p.pp * p.virtual_stages
    if p.layer_partition is None:
        _require(m.num_layers >= chunks, "parallel.pp",
                 f"model.num_layers={m.num_layers} < pp x virtual_stages = {chunks}")
    else:
        _require(len(p.layer_partition) == chunks and sum(p.layer_partition) == m.num_layers,
                 "parallel.layer_partition", f"needs {chunks} entries summing to {m.num_layers}")
    schedule = spec(p.schedule)  # its chunk rule here, its micro-batch rule once dp is known
    for problem in schedule.check(p.pp, p.virtual_stages):
        _refuse(problem)
    _refuse(schedule.checkpointing_problem(t.activation_checkpointing))
    _check_context_parallel(config)
    if p.sequence_parallel:
        _require(m.seq_length % p.tp == 0, "parallel.sequence_parallel",
                 f"model.seq_length={m.seq_length} must be divisible by tp={p.tp}")
    dp = p.dp
    if world_size is not None:
        model_parallel = p.tp * p.pp * p.cp
        cp = " x cp" if p.cp > 1 else ""
        _require(world_size % model_parallel == 0, "parallel.tp" if p.cp == 1 else "parallel.cp",
                 f"world size {world_size} is not divisible by tp x pp{cp} = {model_parallel}")
        dp = dp or world_size // model_parallel
        _require(dp * model_parallel == world_size, "parallel.dp",
                 f"dp x pp{cp} x tp = {dp} x {p.pp}{f' x {p.cp}' if p.cp > 1 else ''} x {p.tp} = {dp * model_parallel} "
                 f"!= world size {world_size}")
    _check_dp_shard(p, dp or None)
    dp = dp or 1
    granule = t.micro_batch_size * dp
    _require(t.global_batch_size % granule == 0, "train.global_batch_size",
             f"{t.global_batch_size} is not divisible by micro_batch_size x dp = {t.micro_batch_size} x {dp}")
    _check_rampup(t, granule)
    sizes = [t.global_batch_size] + (list(t.rampup_batch_size[:2]) if t.rampup_batch_size else [])
    _refuse(schedule.micro_batch_problem(p.pp, tuple(size // granule for size in sizes)),
            f" (global and ramp-up start/increment batch sizes {sizes} / micro_batch_size x dp = {granule})")
    _require(t.min_lr <= t.lr, "train.min_lr", f"must be <= train.lr, got {t.min_lr} > {t.lr}")
    _check_data_paths(config.data.paths)
    if (problem := eval_problem(config.eval)) is not None:
        raise ConfigError(f"config key '{problem[0]}': {problem[1]}")


def validate_model(config: Config) -> None:
    """The model's keys alone, for commands that choose the layout themselves (trident plan)."""
    for key, choices in MODEL_CHOICES.items():
        value = getattr(config.model, key.split(".")[1])
        _require(value in choices, key, f"must be one of {choices}, got {value!r}{did_you_mean(value, choices)}")
    _require(config.model.num_kv_heads >= 0, "model.num_kv_heads", f"must be >= 0, got {config.model.num_kv_heads}")
    for problem in model_problems(config.model, tp=1):
        _refuse(problem)


def _check_data_paths(paths: list) -> None:
    if len(paths) > 1 and isinstance(paths[0], (int, float)):
        _require(len(paths) % 2 == 0 and all(isinstance(w, (int, float)) for w in paths[0::2]), "data.paths",
                 "weighted form is [weight, prefix, weight, prefix, ...]")
