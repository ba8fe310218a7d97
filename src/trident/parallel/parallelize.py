"""The one place where a layout is applied to the model: `parallelize(config, mesh, device, precision)`.

In order, as torchtitan's parallelize does it:
  1. seed the RNG streams: one per pipeline stage, shared by TP peers (replicated regions), plus a
     per-TP-rank stream for regions split across TP (Megatron's model-parallel RNG tracker);
  2. build this rank's model chunks (one per virtual stage) for its (pipeline stage, tensor rank),
     each a GPT over its slice of the layers with its slice of the seeded initialisation, created
     directly in the training dtype on the device (no full-size tensor, no second copy);
  3. compile blocks when asked;
  4. the pipeline executor, when there is more than one stage;
  5. flat weight and gradient buffers and AdamW over the ranges this rank owns (the ZeRO stage decided here,
     once; at stage 3 the hooks that gather each unit's parameters around its use, param_gather.py).
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
from torch._subclasses.fake_tensor import is_fake

from trident.config import Config, ConfigError, ModelConfig
from trident.model.gpt import GPT, TIED_EMBEDDING, build_model
from trident.parallel import tensor as T
from trident.parallel.context import RING_TRAFFIC
from trident.parallel.context_chunks import split_for_rank
from trident.parallel.data import all_reduce_coalesced
from trident.parallel.device_clock import clock_for
from trident.parallel.layout import RankLayout, rank_layout
from trident.parallel.optim import build_optimizer, clip_coefficient, global_grad_norm_squared, scale_
from trident.parallel.param_gather import ParamGather, unit_keys
from trident.parallel.pipeline.executor import PipelineExecutor
from trident.parallel.pipeline.timeline import TimelineRecorder
from trident.parallel.precision import Precision
from trident.parallel.state import (KINDS, StatePiece, adam_pieces, by_kind, owned_weight_pieces, rng_pieces,
                                   weight_pieces)
from trident.parallel.watch import watched


def seed_streams(seed: int, mesh, device: torch.device, tp_rng: T.TPRandomState) -> None:
    """Same stream on every TP rank of a stage (replicated dropout), a per-TP-rank one for split regions;
    each CP rank its own (its tokens are other tokens of the sequence)."""
    stage_seed = seed + 100 * mesh.pp_rank + 1_000_003 * mesh.cp_rank
    random.seed(stage_seed)
    np.random.seed(stage_seed % 2**32)
    torch.manual_seed(stage_seed)
    tp_rng.seed(stage_seed + 2718 + mesh.tp_rank, device)


def build_model_chunks(model: ModelConfig, layout: RankLayout, tp: T.TPContext, *, seed: int,
                       activation_checkpointing: str = "none", compile: bool = False, device: torch.device,
                       dtype: torch.dtype = torch.float32) -> list[GPT]:
    """One chunk per virtual stage held by this rank (one, unless the schedule is interleaved); `tp`
    carries the TP group and the split-region dropout stream its layers draw from."""
    if model.vocab_size <= 0:
        raise ConfigError("config key 'model.vocab_size' is unknown: set it or give data.tokenizer")
    chunks = []
    for c, layers in enumerate(layout.chunk_layers):
        # built in place, in the final dtype and device: no second copy (and FakeTensorMode-safe)
        chunk = build_model(model, layout.padded_vocab_size, seed, tp=tp, layers=layers,
                            pre_process=layout.is_first_chunk(c), post_process=layout.is_last_chunk(c),
                            activation_checkpointing=activation_checkpointing, device=device, dtype=dtype)
        if compile:  # each block's compute, not its module call: ZeRO-3's gather hooks run around it, eagerly
            for block in chunk.blocks.values():
                block.forward = torch.compile(block.forward)
        chunks.append(chunk)
    return chunks


def compiled_blocks(chunks: list) -> int:
    """How many blocks run under torch.compile: build_model_chunks wraps each block's forward (an
    instance attribute), not the module, so the module-level marks of torch.compile are absent."""
    return sum(hasattr(vars(block).get("forward"), "_torchdynamo_orig_callable")
               for chunk in chunks for block in chunk.blocks.values())


def counts_towards_norm(name: str, param: torch.nn.Parameter, is_first_stage: bool) -> bool:
    """Each parameter counted once across the model-parallel group: TP shards all count (they are
    disjoint), TP-replicated parameters only on TP rank 0, and the tied word embedding only on the
    first pipeline stage (the last stage holds a synchronised copy)."""
    if getattr(param, "tp_dim", None) is None and getattr(param, "tp_rank", 0) != 0:
        return False
    return not (name.endswith(TIED_EMBEDDING) and not is_first_stage)


def _tied_across_stages(config: Config, mesh) -> bool:
    """The first and last pipeline stages each hold the tied word embedding (model.tie_embeddings)."""
    return mesh.pp > 1 and config.model.tie_embeddings


def parallelize(config: Config, mesh, device: torch.device, precision: Precision | None = None,
                optimizer: bool = True) -> "ParallelModel":
    """This rank's share of the model for `mesh`, ready to train (or, with optimizer=False, to
    run forward only: no gradient buffers, no optimizer state)."""
    precision = precision or Precision.from_config(config.train, device)
    layout, t = rank_layout(config, mesh), config.train
    tp_rng = T.TPRandomState()
    seed_streams(t.seed, mesh, device, tp_rng)
    chunks = build_model_chunks(config.model, layout, mesh.tp_context(layout.sequence_parallel, tp_rng), seed=t.seed,
                                activation_checkpointing=t.activation_checkpointing, compile=t.compile, device=device,
                                dtype=precision.dtype)
    executor = _build_executor(layout, mesh, chunks, precision) if mesh.pp > 1 else None
    named_params = [item for chunk in chunks for item in chunk.named_parameters()]
    params = grads = adam = None
    if optimizer:
        counted = {id(p): counts_towards_norm(n, p, mesh.is_first_stage) for n, p in named_params}
        # the tied embedding's two stage copies are summed (finalize_gradients) over their owned slices,
        # which line up on both stages when it has a bucket of its own
        tied = [p for n, p in named_params if n == TIED_EMBEDDING] if _tied_across_stages(config, mesh) else []
        units = unit_keys(chunks) if layout.zero_stage == 3 else None
        params, grads, adam = build_optimizer(named_params, config, mesh, layout.zero_stage, counted, alone=tied,
                                        unit_of=units)
        grads.recorder = executor.recorder if executor is not None else None
        if units is not None:
            ParamGather(params, grads, chunks)
    return ParallelModel(config, layout, mesh, chunks, named_params, executor, precision, (params, grads), adam,
                         tp_rng)


def _build_executor(layout: RankLayout, mesh, chunks: list[GPT], precision: Precision):
    shape = layout.activation_shape(layout.seq_length, layout.micro_batch_size)
    return PipelineExecutor(chunks, mesh, layout.schedule, shape, precision.dtype, precision.device,
                            precision.autocast, recorder=TimelineRecorder(mesh.pp_rank, clock_for(precision.device)))


class ParallelModel:
    """This rank's model chunks with everything that makes them train as one model: the pipeline
    executor, the flat gradient buffers and the (ZeRO-1 sharded) optimizer."""

    def __init__(self, config: Config, layout: RankLayout, mesh, chunks: list[GPT], named_params: list, executor,
                 precision: Precision, buffers: tuple, optimizer, rng: T.TPRandomState):
        self.config, self.layout, self.mesh, self.chunks, self.named_params = config, layout, mesh, chunks, named_params
        self.executor, self.precision, self.device = executor, precision, precision.device
        self.param_buffers, self.grad_buffers = buffers  # parallel/param_buffers.py, parallel/data.py (or None)
        self.optimizer, self.rng = optimizer, rng

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
        """Sum over micro-batches of the mean token loss / loss_divisor (micro-batches x dp; a context-
        parallel rank's mean over its share of the tokens is further divided by cp, so sums over the
        gradient group dp x cp give the global mean); gradients accumulate in the fp32 buffers. With
        pipeline stages the loss is non-zero on the last stage only. With dp x cp > 1 a bucket's
        gradient reduction starts as soon as its gradients are final (after their last micro-batch's
        backward, during the pipeline's drain); finalize_gradients waits for them."""
        if self.grad_buffers is not None:  # one accumulation per micro-batch
            self.grad_buffers.expect_accumulations(len(micro_batches))
        return self._run(micro_batches, loss_divisor, backward=True)

    @torch.no_grad()
    def forward_only(self, micro_batches: list, loss_divisor: int) -> torch.Tensor:
        """As forward_backward, without gradients (validation)."""
        return self._run(micro_batches, loss_divisor, backward=False)

    @torch.inference_mode()
    def forward_logits(self, token_batches: list[torch.Tensor], on_logits) -> None:
        """Each batch of token ids [b, s] through this rank's pipeline (pipelined across stages when
        there are several); the last stage calls on_logits(index, logits [b, s, V/tp]) per batch.
        Every rank of a pipeline must pass batches of the same shapes (s a multiple of tp with SP).
        Whole sequences: at cp = 1 only (evaluation reads any checkpoint at cp = 1)."""
        if self.layout.cp > 1:
            raise ValueError(f"forward_logits scores whole sequences on one rank; this model is split over "
                             f"parallel.cp={self.layout.cp} ranks: evaluate at parallel.cp=1")
        if self.executor is None:
            for index, ids in enumerate(token_batches):
                with self.precision.autocast():
                    on_logits(index, self.chunks[0](ids))
            return
        shapes = [self.layout.activation_shape(ids.shape[1], ids.shape[0]) for ids in token_batches]
        self.executor.run([(ids, None) for ids in token_batches], 1, backward=False, shapes=shapes,
                          on_output=on_logits)

    def sequence_part(self, x: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """This rank's part of whole sequences `x` (tokens, labels, masks; sequence along `dim`): with
        context parallelism its two load-balanced chunks (parallel/context_chunks.py), else all of it."""
        return split_for_rank(x, dim, self.layout.cp, self.layout.cp_rank) if self.layout.cp > 1 else x

    def _run(self, micro_batches: list, loss_divisor: int, backward: bool) -> torch.Tensor:
        loss_divisor *= self.layout.cp  # each CP rank's mean token loss is over 1/cp of the tokens
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
        """Global-batch mean loss, on every rank (sum of the DP and CP partial means, from the last stage)."""
        for kind in ("pp", "dp_cp"):
            if self.mesh.group(kind) is not None:
                with watched(self.mesh.group(kind), "all_reduce loss"):
                    dist.all_reduce(loss, group=self.mesh.group(kind))
        return loss

    # ---- gradients and the update ----------------------------------------------------------------
    def zero_grad(self) -> None:
        self.grad_buffers.zero_grad()
        self.param_buffers.sent_bytes = 0
        RING_TRAFFIC.reset()

    def finalize_gradients(self) -> None:
        """Cross-rank gradient sums (losses were already divided by m x dp x cp, so sums give
        the global mean): the buckets over the gradient group dp x cp, then, on the owned slices,
        the tied embedding over its two pipeline stages and TP-partial gradients (sequence-parallel
        norms, replicated key/value heads) over TP (TP peers share a buffer layout, and the tied
        embedding has a bucket of its own on both stages, so their owned slices line up)."""
        mesh = self.mesh
        self.grad_buffers.reduce()
        if _tied_across_stages(self.config, mesh) and (mesh.is_first_stage or mesh.is_last_stage):
            word = [self.grad_buffers.owned_grad(p) for n, p in self.named_params if n == TIED_EMBEDDING]
            all_reduce_coalesced(word, mesh.group("embedding"))
        # TP-replicated parameters each rank saw only part of: norms under SP, replicated key/value heads
        partial = [self.grad_buffers.owned_grad(p) for _, p in self.named_params
                   if getattr(p, "sequence_parallel", False) or getattr(p, "partial_across_tp", False)]
        if mesh.tp > 1 and partial:
            all_reduce_coalesced(partial, mesh.group("tp"))

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
        """A 0-d tensor's value; 1.0 for a fake tensor (rehearsal), which holds none."""
        return 1.0 if is_fake(scalar) else scalar.item()

    def step(self, lr: float, loss: float = 0.0) -> tuple[float, bool]:
        """Unscale, clip to train.clip_grad and update; returns (global grad norm, skipped).
        The norm is inf/nan whenever any gradient is, and every rank computes the same value: one
        reduction gives both the clipping norm and the overflow decision all ranks agree on (a
        non-finite `loss` skips the step too)."""
        grads = self.optimizer.grads()
        scale_(grads, 1.0 / self.scaler.scale)
        grad_norm = math.sqrt(self.to_float(global_grad_norm_squared(self.optimizer, self.mesh, self.layout.zero)))
        overflow = not (math.isfinite(grad_norm) and math.isfinite(loss))
        if not overflow:
            scale_(grads, clip_coefficient(grad_norm, self.config.train.clip_grad))
            self.optimizer.step(lr)
        self.scaler.update(overflow)
        return (float("nan") if overflow else grad_norm), overflow

    # ---- state: the records checkpoints, imports and tools read and write (parallel/state.py) -----
    def rng_states(self) -> dict[str, torch.Tensor]:
        """Every RNG stream this rank draws from: the default generator(s) and the split-region stream."""
        states = {"torch_cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            states["torch_cuda"] = torch.cuda.get_rng_state(self.device)
        return states | {f"tp_{k}": v for k, v in self.rng.get_states().items()}

    def set_rng_states(self, streams: dict[str, torch.Tensor]) -> None:
        """Put back streams as `rng_states()` returned them."""
        torch.set_rng_state(streams["torch_cpu"])
        if "torch_cuda" in streams:
            torch.cuda.set_rng_state(streams["torch_cuda"], self.device)
        self.rng.set_states({k[3:]: v for k, v in streams.items() if k.startswith("tp_")})

    def state_pieces(self) -> list[StatePiece]:
        """This rank's whole state as records: weights, owned Adam ranges, RNG streams, loss scaler
        and optimizer step count. Weights are primary on the gradient group's first rank only (at ZeRO-3
        each rank's owned part of them on every rank); Adam state with ZeRO on every rank (each owns a
        disjoint part), without it on the gradient group's first rank (the others are replicas).
        Under hybrid sharding only the first replica group's owned parts are primary."""
        first_copy = self.optimizer is None or self.optimizer.layout.replicas.rank == 0  # of a shard (hybrid sharding)
        if self.layout.zero_stage == 3:
            pieces = owned_weight_pieces(self.named_params, self.param_buffers, primary=first_copy)
        else:
            pieces = weight_pieces(self.named_params, primary=self.mesh.gradient.rank == 0)  # dp x cp hold copies
        if self.optimizer is not None:
            owns_adam = (self.layout.zero and first_copy) or self.mesh.gradient.rank == 0
            pieces += adam_pieces(self.named_params, self.optimizer, primary=owns_adam)
            pieces.append(StatePiece("optimizer_steps", "trainer", value=self.optimizer.steps))
        pieces += rng_pieces(self.rng_states())
        pieces.append(StatePiece("scaler", "scaler", value=self.scaler.state_dict()))
        return pieces

    def load_pieces(self, reader, kinds: tuple[str, ...] = KINDS) -> None:
        """Fill this rank's state of `kinds` from `reader` (checkpoint.reader.CheckpointReader, any
        saved layout): weights and owned Adam ranges in place; RNG streams only when the saved layout
        is this one (otherwise they keep their fresh seeding); the scaler and the step count."""
        wanted = [piece for piece in self.state_pieces() if piece.kind in kinds]
        loaded = reader.fill(wanted, layout=self.layout.record, rank=self.mesh.rank, model_config=self.config.model)
        streams = {piece.name: piece.tensor for piece in by_kind(loaded, "rng")}
        if streams:
            self.set_rng_states(streams)
        for piece in by_kind(loaded, "scaler"):
            self.scaler.load_state_dict(piece.value)
        for piece in by_kind(loaded, "trainer"):
            self.optimizer.steps = int(piece.value)

    def replica_weights(self) -> list[tuple[str, torch.Tensor]]:
        """(name, tensor) of what every replica in the gradient group holds identically (digested to catch silent
        corruption): the parameters, or nothing at ZeRO-3, where each rank holds only its own part."""
        return [] if self.layout.zero_stage == 3 else list(self.named_params)

    def held_weights(self) -> list[tuple[str, torch.Tensor]]:
        """(name, tensor) of what this rank itself stores of each parameter (its owned part at ZeRO-3)."""
        if self.layout.zero_stage == 3:
            return [(piece.name, piece.tensor) for piece in owned_weight_pieces(self.named_params, self.param_buffers)]
        return list(self.named_params)

    @property
    def dp_sent_bytes(self) -> int:
        """Bytes this rank sent in data-parallel collectives since the step began (ring algorithms)."""
        return self.grad_buffers.sent_bytes + self.param_buffers.sent_bytes

    @property
    def cp_sent_bytes(self) -> int:
        """Bytes this rank sent around its context-parallel ring since the step began: ring attention's
        K/V blocks and their fp32 gradients (docs/training.md, "Context parallelism")."""
        return RING_TRAFFIC.forward_bytes + RING_TRAFFIC.backward_bytes

    def state_bytes(self) -> dict[str, int]:
        """Bytes of the tensors that live for the whole run: weights, fp32 gradients, optimizer state."""
        params, grads = self.param_buffers.params, self.grad_buffers.grads
        return {"weights": params.numel() * params.element_size(), "gradients": grads.numel() * grads.element_size(),
                "optimizer": self.optimizer.state_bytes()}

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
