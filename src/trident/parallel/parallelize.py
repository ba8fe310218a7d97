"""The one place where a layout is applied to the model: `parallelize(config, mesh, device, precision)`.

In order, as torchtitan's parallelize does it:
  1. seed the RNG streams: one per pipeline stage, shared by TP peers (replicated regions), plus a
     per-TP-rank stream for regions split across TP (Megatron's model-parallel RNG tracker);
  2. build this rank's model chunks (one per virtual stage) for its (pipeline stage, tensor rank),
     each a GPT over its slice of the layers with its slice of the seeded initialisation, created
     directly in the training dtype on the device (no full-size tensor, no second copy);
  3. compile blocks when asked;
  4. the pipeline executor, when there is more than one stage;
  5. flat gradient buffers and AdamW over the ranges this rank owns (ZeRO-1 decided here, once).
The result, a ParallelModel, runs micro-batches (`forward_backward`, `forward_only`), finishes the
cross-rank gradient sums (`finalize_gradients`) and steps the optimizer (`step`). The trainer, the
parallel evaluator and rehearsal all call it; none of them builds parallel pieces itself.
"""
from __future__ import annotations

import math
import random

import numpy as np
import torch
import torch.distributed as dist

from trident.config import Config, ConfigError
from trident.model.gpt import GPT, TIED_EMBEDDING, build_model
from trident.parallel import tensor as T
from trident.parallel.data import all_reduce_coalesced
from trident.parallel.optim import build_optimizer, clip_coefficient, global_grad_norm_squared, scale_
from trident.parallel.pipeline.schedules import partition_layers
from trident.parallel.pipeline.executor import PipelineExecutor
from trident.parallel.pipeline.timeline import TimelineRecorder
from trident.parallel.precision import Precision
from trident.parallel.watch import watched


def seed_streams(seed: int, mesh, device: torch.device) -> None:
    """Same stream on every TP rank of a stage (replicated dropout), a per-TP-rank one for split regions."""
    stage_seed = seed + 100 * mesh.pp_rank
    random.seed(stage_seed)
    np.random.seed(stage_seed % 2**32)
    torch.manual_seed(stage_seed)
    T.TP_RNG.seed(stage_seed + 2718 + mesh.tp_rank, device)


def build_model_chunks(config: Config, mesh, device: torch.device, dtype: torch.dtype = torch.float32) -> list[GPT]:
    """One chunk per virtual stage held by this rank (one, unless the schedule is interleaved)."""
    cfg = config
    if cfg.model.vocab_size <= 0:
        raise ConfigError("config key 'model.vocab_size' is unknown: set it or give data.tokenizer")
    tp = mesh.tp_context(cfg.parallel.sequence_parallel)
    v = cfg.parallel.virtual_stages
    ranges = partition_layers(cfg.model.num_layers, mesh.pp, v, cfg.parallel.layer_partition)[mesh.pp_rank]
    chunks = []
    for c, layers in enumerate(ranges):
        # built in place, in the final dtype and device: no second copy (and FakeTensorMode-safe)
        chunk = build_model(cfg.model, cfg.model.padded_vocab_size(mesh.tp), cfg.train.seed, tp=tp, layers=layers,
                            pre_process=mesh.is_first_stage and c == 0, post_process=mesh.is_last_stage and c == v - 1,
                            activation_checkpointing=cfg.train.activation_checkpointing, device=device, dtype=dtype)
        if cfg.train.compile:  # per block: each compiles once and is reused by every layer of its shape
            for block in chunk.blocks.values():
                block.compile()
        chunks.append(chunk)
    return chunks


def counts_towards_norm(name: str, param: torch.nn.Parameter, is_first_stage: bool) -> bool:
    """Each parameter counted once across the model-parallel group: TP shards all count (they are
    disjoint), TP-replicated parameters only on TP rank 0, and the tied word embedding only on the
    first pipeline stage (the last stage holds a synchronised copy)."""
    if getattr(param, "tp_dim", None) is None and getattr(param, "tp_rank", 0) != 0:
        return False
    return not (name.endswith(TIED_EMBEDDING) and not is_first_stage)


def parallelize(config: Config, mesh, device: torch.device, precision: Precision | None = None,
                optimizer: bool = True) -> "ParallelModel":
    """This rank's share of the model for `mesh`, ready to train (or, with optimizer=False, to
    run forward only: no gradient buffers, no optimizer state)."""
    precision = precision or Precision.from_config(config.train, device)
    seed_streams(config.train.seed, mesh, device)
    chunks = build_model_chunks(config, mesh, device, precision.dtype)
    executor = _build_executor(config, mesh, chunks, precision) if mesh.pp > 1 else None
    named_params = [item for chunk in chunks for item in chunk.named_parameters()]
    zero = config.parallel.zero_stage == 1 and mesh.dp > 1  # decided here, once
    buffers = adam = None
    if optimizer:
        counted = {id(p): counts_towards_norm(n, p, mesh.is_first_stage) for n, p in named_params}
        # the tied embedding's two stage copies are summed (finalize_gradients) before its DP reduction
        tied = [p for n, p in named_params if n == TIED_EMBEDDING] if mesh.pp > 1 else []
        buffers, adam = build_optimizer(named_params, config, mesh, zero, counted, deferred=tied)
        buffers.recorder = executor.recorder if executor is not None else None
    return ParallelModel(config, mesh, chunks, named_params, executor, precision, zero, buffers, adam)


def _build_executor(config: Config, mesh, chunks: list[GPT], precision: Precision):
    seq = config.model.seq_length // (mesh.tp if config.parallel.sequence_parallel else 1)
    shape = (seq, config.train.micro_batch_size, config.model.hidden_size)
    return PipelineExecutor(chunks, mesh, config.parallel.schedule, shape, precision.dtype, precision.device,
                            precision.autocast, recorder=TimelineRecorder(mesh.pp_rank))


class ParallelModel:
    """This rank's model chunks with everything that makes them train as one model: the pipeline
    executor, the flat gradient buffers and the (ZeRO-1 sharded) optimizer."""

    def __init__(self, config: Config, mesh, chunks: list[GPT], named_params: list, executor, precision: Precision,
                 zero: bool, buffers, optimizer):
        self.config, self.mesh, self.chunks, self.named_params = config, mesh, chunks, named_params
        self.executor, self.precision, self.device = executor, precision, precision.device
        self.zero, self.buffers, self.optimizer = zero, buffers, optimizer

    @property
    def scaler(self):
        return self.precision.scaler

    def train(self, mode: bool = True) -> "ParallelModel":
        for chunk in self.chunks:
            chunk.train(mode)
        return self

    def eval(self) -> "ParallelModel":
        return self.train(False)

    # ---- micro-batches ---------------------------------------------------------------------------
    def forward_backward(self, micro_batches: list, loss_divisor: int) -> torch.Tensor:
        """Sum over micro-batches of the mean token loss / loss_divisor; gradients accumulate in the
        fp32 buffers. With pipeline stages the loss is non-zero on the last stage only. With dp > 1 a
        bucket's DP reduction starts as soon as its gradients are final (after their last micro-batch's
        backward, during the pipeline's drain); finalize_gradients waits for them."""
        if self.buffers is not None:  # one accumulation per micro-batch
            self.buffers.expect_accumulations(len(micro_batches))
        return self._run(micro_batches, loss_divisor, backward=True)

    @torch.no_grad()
    def forward_only(self, micro_batches: list, loss_divisor: int) -> torch.Tensor:
        """As forward_backward, without gradients (validation)."""
        return self._run(micro_batches, loss_divisor, backward=False)

    @torch.inference_mode()
    def forward_logits(self, token_batches: list[torch.Tensor], on_logits) -> None:
        """Each batch of token ids [b, s] through this rank's pipeline (pipelined across stages when
        there are several); the last stage calls on_logits(index, logits [b, s, V/tp]) per batch.
        Every rank of a pipeline must pass batches of the same shapes (s a multiple of tp with SP)."""
        if self.executor is None:
            for index, ids in enumerate(token_batches):
                with self.precision.autocast():
                    on_logits(index, self.chunks[0](ids))
            return
        split = self.mesh.tp if self.config.parallel.sequence_parallel else 1
        hidden = self.config.model.hidden_size
        shapes = [(ids.shape[1] // split, ids.shape[0], hidden) for ids in token_batches]
        self.executor.run([(ids, None) for ids in token_batches], 1, backward=False, shapes=shapes,
                          on_output=on_logits)

    def _run(self, micro_batches: list, loss_divisor: int, backward: bool) -> torch.Tensor:
        if self.executor is not None:
            return self.executor.run(micro_batches, loss_divisor, self.scaler.scale, backward)
        total = torch.zeros((), device=self.device)
        for tokens, labels in micro_batches:
            with self.precision.autocast():
                loss = self.chunks[0](tokens, labels).float().mean() / loss_divisor
            if backward:
                (loss * self.scaler.scale).backward()
            total += loss.detach()
        return total

    def reduce_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """Global-batch mean loss, on every rank (sum of the DP partial means, from the last stage)."""
        for kind in ("pp", "dp"):
            if self.mesh.group(kind) is not None:
                with watched(self.mesh.group(kind), "all_reduce loss"):
                    dist.all_reduce(loss, group=self.mesh.group(kind))
        return loss

    # ---- gradients and the update ----------------------------------------------------------------
    def zero_grad(self) -> None:
        self.buffers.zero_grad()

    def finalize_gradients(self) -> None:
        """Cross-rank gradient sums (losses were already divided by m x dp, so sums give the global
        mean): the tied embedding over its two pipeline stages, the DP buckets, then sequence-parallel
        norms over TP (TP peers share a buffer layout, so their owned ranges line up)."""
        mesh = self.mesh
        if mesh.pp > 1 and (mesh.is_first_stage or mesh.is_last_stage):
            word = [p.main_grad for n, p in self.named_params if n == TIED_EMBEDDING]
            all_reduce_coalesced(word, mesh.group("embedding"))
        self.buffers.reduce()
        if mesh.tp > 1 and self.config.parallel.sequence_parallel:
            sp = [p.main_grad for _, p in self.named_params if getattr(p, "sequence_parallel", False)]
            all_reduce_coalesced(sp, mesh.group("tp"))

    def train_step(self, micro_batches: list, loss_divisor: int, lr: float,
                   on_phase=None) -> tuple[torch.Tensor, float, bool]:
        """One optimizer step over the micro-batches: (global mean loss, grad norm, skipped).
        `on_phase(name)` is called as each phase ends: forward_backward, finalize, step."""
        on_phase = on_phase or (lambda name: None)
        self.train()
        self.zero_grad()
        loss = self.forward_backward(micro_batches, loss_divisor)
        on_phase("forward_backward")
        self.finalize_gradients()
        loss = self.reduce_loss(loss)
        on_phase("finalize")
        grad_norm, skipped = self.step(lr, self.to_float(loss))
        on_phase("step")
        return loss, grad_norm, skipped

    @staticmethod
    def to_float(scalar: torch.Tensor) -> float:
        """A 0-d tensor's value (rehearsal replaces it: fake tensors hold no values)."""
        return scalar.item()

    def step(self, lr: float, loss: float = 0.0) -> tuple[float, bool]:
        """Unscale, clip to train.clip_grad and update; returns (global grad norm, skipped).
        The norm is inf/nan whenever any gradient is, and every rank computes the same value: one
        reduction gives both the clipping norm and the overflow decision all ranks agree on (a
        non-finite `loss` skips the step too)."""
        grads = self.optimizer.grads()
        scale_(grads, 1.0 / self.scaler.scale)
        grad_norm = math.sqrt(self.to_float(global_grad_norm_squared(self.optimizer, self.mesh, self.zero)))
        overflow = not (math.isfinite(grad_norm) and math.isfinite(loss))
        if not overflow:
            scale_(grads, clip_coefficient(grad_norm, self.config.train.clip_grad))
            self.optimizer.step(lr)
        self.scaler.update(overflow)
        return (float("nan") if overflow else grad_norm), overflow

    # ---- timeline --------------------------------------------------------------------------------
    def start_timeline(self) -> None:
        """Time the next runs' compute on every stage from one shared origin (after a barrier)."""
        with watched(self.mesh.group("pp")):
            dist.barrier(group=self.mesh.group("pp"))
        self.executor.recorder.start()

    def finish_timeline(self, gather: bool = True) -> list:
        """The boxes since start_timeline: every stage's (collective over the pipeline group), or with
        gather=False this stage's only (no collective)."""
        mine = self.executor.recorder.stop()
        if not gather:
            return mine
        boxes = [None] * self.mesh.pp
        with watched(self.mesh.group("pp")):
            dist.all_gather_object(boxes, mine, group=self.mesh.group("pp"))
        return [box for stage in boxes for box in stage]
