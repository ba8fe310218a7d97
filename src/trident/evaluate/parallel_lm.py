"""Evaluating a trident checkpoint too large for one device: tensor x pipeline x data parallel.

`load_parallel(CKPT, ["parallel.tp=2", "parallel.pp=2"])` builds, on every rank, the model chunk
of its (pipeline stage, tensor rank) with trident.parallel.parallelize.parallelize and
loads that chunk's slices from the checkpoint, whatever layout saved it. The result is an LM
(a CausalLM) that `run_evaluation` uses unchanged.

Lock step, not driver/followers: every rank runs the same harness on the same, deterministic
request list (tasks, few-shot draws and batching are all seeded), so no command protocol is needed,
a data error stops every rank at the same point, and every rank ends with every score (rank 0
writes results.json). A digest of the requests is compared across ranks before each scoring pass,
so a divergence fails loudly instead of deadlocking.

The model is built by trident.parallel.parallelize (the trainer's builder) and its batches run
through `ParallelModel.forward_logits`: the pipeline executor's forward-only schedule, with the
batches of a window as micro-batches, so stage i works on batch k+1 while stage i+1 works on batch
k; shapes follow from the batch, which every rank knows, so no shape header is sent. The last
stage scores the continuations from its vocabulary-split logits [b, s, V/tp] without gathering
them: max, arg-max and sum-exp are all-reduced over the TP group and the target's logit comes from
the rank that owns it (as vocab-parallel cross-entropy), so only [b, s] statistics cross ranks.
Data-parallel replicas take batches round-robin (at ZeRO-3, whose ranks all-gather each layer's
weights together, every replica runs as many batches, the short ones repeating a batch they do not
read); scores are all-gathered over the world.
Generation (bias probes) is KV-cached (trident.infer.engine): one token a row per step, the
next-token logits [b, V] gathered on the last stage only, every replica generating every prompt.
"""
from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import torch
import torch.distributed as dist

from trident.config import Config, ConfigError, config_from_dict, parse_overrides
from trident.evaluate.lm import CausalLM
from trident.evaluate.requests import Row, TokenRequest, batches, plan_rows
from trident.infer.batching import generate_rows
from trident.infer.engine import Engine
from trident.parallel.parallelize import ParallelModel, parallelize
from trident.parallel.precision import Precision
from trident.parallel.tensor import gather_from_tp, vocab_parallel_scores
from trident.tasks.types import Loglikelihood
from trident.text.progress import progress_bar
from trident.text.storage import location

# the parallel.* keys that change how a checkpoint is evaluated; the rest are training-only
LAYOUT_KEYS = ("tp", "pp", "dp", "sequence_parallel", "layer_partition")


def eval_config(saved: dict, overrides: list[str], world_size: int, source: str = "checkpoint") -> Config:
    """The checkpoint's config with the evaluation layout (`parallel.KEY=VALUE` overrides) applied
    and validated for `world_size` ranks. Raises ConfigError naming the key and `source`."""
    layout = parse_overrides(list(overrides))
    extra = sorted(set(layout) - {"parallel"})
    if extra:
        raise ConfigError(f"{source}: evaluation overrides may only set the layout (parallel.*), got "
                          f"{', '.join(extra)}.*; the model is the checkpoint's")
    asked = layout.get("parallel", {})
    unknown = sorted(set(asked) - set(LAYOUT_KEYS))
    if unknown:
        raise ConfigError(f"{source}: parallel.{unknown[0]} does not apply to evaluation; "
                          f"layout keys: {', '.join('parallel.' + k for k in LAYOUT_KEYS)}")
    tree = copy.deepcopy(saved)
    tree["parallel"] = dict(asked)  # the training layout is irrelevant: any saved layout loads into any other
    # the train section only has to be valid, not meaningful: one sequence a rank
    tree["train"] = {**tree.get("train", {}), "micro_batch_size": 1, "global_batch_size": world_size,
                     "rampup_batch_size": None}
    try:
        return config_from_dict(tree).validate(world_size)
    except ConfigError as error:
        raise ConfigError(f"{source}: cannot evaluate with this layout on {world_size} rank(s): {error}") from None


def checkpoint_layout(checkpoint: str | Path, overrides: list[str], world_size: int):
    """(CheckpointReader, evaluation Config) for `checkpoint`, checked against the saved embedding."""
    from trident.checkpoint.reader import CheckpointReader, resolve_checkpoint

    path = resolve_checkpoint(str(checkpoint), location(checkpoint)) or location(checkpoint)
    reader = CheckpointReader(path, verify="loaded")  # each rank reads (and checks) only its slices
    config = eval_config(reader.state["config"], overrides, world_size, source=str(path))
    saved_rows = reader.full_shape("embedding.word.weight")[0]
    m, tp = config.model, config.parallel.tp
    if m.vocab_size <= 0:  # older configs left it to the tokenizer; the saved embedding knows
        m.vocab_size = saved_rows
    if m.padded_vocab_size(tp) != saved_rows:
        raise ConfigError(f"{path}: parallel.tp={tp} pads the vocabulary ({m.vocab_size}) to "
                          f"{m.padded_vocab_size(tp)} rows but the checkpoint's embedding has {saved_rows}; "
                          f"use a tp that divides model.make_vocab_size_divisible_by={m.make_vocab_size_divisible_by}")
    return reader, config


class ParallelLM(CausalLM):
    """A CausalLM whose model is this rank's chunk of a TP x PP x DP layout; every rank calls every
    method with the same arguments (lock step) and gets the same answers."""

    def __init__(self, model: ParallelModel, tokenizer, *, batch_size: int = 8, info: dict | None = None):
        config = model.config
        super().__init__(self.full_logits, tokenizer, vocab_size=tokenizer.vocab_size, eod_id=tokenizer.eod_id,
                         max_length=config.model.seq_length, batch_size=batch_size, device=model.device, info=info)
        self.model = model.eval()
        self.mesh = model.mesh
        self.sequence_parallel = model.layout.sequence_parallel
        self.tp = self.mesh.tp_context(self.sequence_parallel)
        self._engine: Engine | None = None  # built on the first generate call (its KV cache)

    # ---- one forward through this rank's pipeline ----------------------------------------------
    def _pad(self, rows: list[tuple[int, ...]]) -> torch.Tensor:
        """Right-padded ids [b, w]; with sequence parallelism w is a multiple of tp (padding is
        after every real token, so a causal model's logits at real positions do not change)."""
        width = max(map(len, rows))
        if self.sequence_parallel:
            width = -(-width // self.mesh.tp) * self.mesh.tp
        ids = torch.full((len(rows), width), self.eod_id, dtype=torch.long)
        for b, row in enumerate(rows):
            ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        return ids

    def _forward(self, rows: list[tuple[int, ...]], on_logits) -> None:
        """One padded batch through the pipeline; the last stage calls on_logits(logits [b, w, V/tp])."""
        self.model.forward_logits([self._pad(rows).to(self.device)], lambda _, logits: on_logits(logits))

    def _share_from_last_stage(self, tensor: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor:
        """`tensor` (held by the last stage) on every stage of this rank's pipeline, on the CPU."""
        if self.mesh.pp == 1:
            return tensor.cpu()
        if tensor is None:
            tensor = torch.empty(shape, dtype=torch.float32, device=self.device)
        dist.broadcast(tensor.contiguous(), src=self.mesh.stage_rank(self.mesh.pp - 1), group=self.mesh.group("pp"))
        return tensor.cpu()

    @torch.inference_mode()
    def full_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [b, s, vocab] on every rank of the replica. Gathers the whole vocabulary, so it
        costs b x s x V x 4 bytes a rank; scoring and generation never call it."""
        held = {}
        self.model.forward_logits([ids.to(self.device)], lambda _, logits: held.setdefault(
            "full", gather_from_tp(logits.float(), self.tp, dim=-1)[..., : self.vocab_size]))
        return self._share_from_last_stage(held.get("full"), (*ids.shape, self.vocab_size))

    @torch.inference_mode()
    def next_token_logits(self, rows: list[tuple[int, ...]]) -> torch.Tensor:
        """Logits [b, vocab] after the last token of each row, on every rank of the replica."""
        held = {}

        def last_position(logits: torch.Tensor) -> None:
            ends = torch.tensor([len(r) - 1 for r in rows], device=logits.device)
            picked = logits[torch.arange(len(rows), device=logits.device), ends].float()
            held["last"] = gather_from_tp(picked, self.tp, dim=-1)[:, : self.vocab_size].contiguous()

        self._forward(rows, last_position)
        return self._share_from_last_stage(held.get("last"), (len(rows), self.vocab_size))

    # ---- scoring ----------------------------------------------------------------------------------
    def score_tokens(self, requests: list[TokenRequest], desc: str = "") -> list[Loglikelihood]:
        """Every replica scores its share of the length-sorted batches; all ranks get every score."""
        self._agree(("score", [(r.index, r.context, r.continuation) for r in requests]))
        everything = batches(plan_rows(requests, self.max_length), self.batch_size)
        mine = everything[self.mesh.dp_rank:: self.mesh.dp]
        real = len(mine)  # the rest (ZeRO-3) are repeats of the first batch, run and not read
        if self.model.layout.zero_stage == 3:  # its DP ranks all-gather each layer together: as many batches each
            mine += everything[:1] * (-(-len(everything) // self.mesh.dp) - real)
        window = 2 * self.mesh.pp  # batches in flight at once: enough to keep every stage busy
        bar = progress_bar(total=len(mine), desc=desc or "loglikelihood", unit="batch", leave=False,
                       enabled=self.progress and self.mesh.rank == 0)
        scored = []
        for start in range(0, len(mine), window):
            group = mine[start: start + window]
            ids = [self._pad([row.tokens for row in batch]).to(self.device) for batch in group]
            self.model.forward_logits(ids + ids[-1:] * self._filler(len(ids)), lambda i, logits: scored.extend(
                self._score_batch(group[i], logits) if i < len(group) and start + i < real else []))
            bar.update(len(group))
        bar.close()
        reporter = self.mesh.is_last_stage and self.mesh.tp_rank == 0  # one copy per replica
        everyone = _all_gather([(i, s.logprob, s.is_greedy, s.num_tokens) for i, s in scored] if reporter else [])
        results: list[Loglikelihood | None] = [None] * len(requests)
        for part in everyone:
            for index, logprob, greedy, n in part:
                results[index] = Loglikelihood(logprob, greedy, n)
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"internal error: requests {missing[:5]} were never scored")
        return results  # type: ignore[return-value]

    def _filler(self, batches: int) -> int:
        """Repeats of the last batch (whose logits are not read) that complete the groups of pp an
        interleaved schedule walks micro-batches in (a training model with virtual stages)."""
        return -batches % self.mesh.pp if self.model.config.parallel.virtual_stages > 1 else 0

    def _score_batch(self, batch: list[Row], logits: torch.Tensor) -> list[tuple[int, Loglikelihood]]:
        """Scores of the batch's requests from its logits [b, w, V/tp] (on the last stage)."""
        lo = min(row.first_read for row in batch)  # earlier positions are never read
        targets = torch.zeros((len(batch), logits.shape[1] - lo), dtype=torch.long)
        for b, row in enumerate(batch):
            for _, start, cont in row.readers:
                targets[b, start - lo: start - lo + len(cont)] = torch.tensor(cont, dtype=torch.long)
        logprob, argmax = vocab_parallel_scores(logits[:, lo:], targets.to(logits.device), self.tp, self.vocab_size)
        logprob, hit = logprob.cpu(), (argmax.cpu() == targets)
        out = []
        for b, row in enumerate(batch):
            for index, start, cont in row.readers:
                span = slice(start - lo, start - lo + len(cont))
                out.append((index, Loglikelihood(logprob[b, span].sum().item(), bool(hit[b, span].all()), len(cont))))
        return out

    # ---- generation -----------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, seed: int = 1234, top_p: float = 1.0) -> list[str]:
        """As CausalLM.generate (same seed, same draws), KV-cached on this layout (trident.infer.engine):
        each step feeds one token per row, and only next-token statistics leave the last stage. Every
        data-parallel replica generates every prompt; the sampler's tokens reach every rank."""
        self._agree(("generate", prompts, max_new_tokens, temperature, top_k, seed, top_p))
        if self._engine is None:
            self._engine = Engine.from_parallel(self.model, self.vocab_size, slots=self.batch_size)
        generator = torch.Generator().manual_seed(seed)

        def choose(logits: torch.Tensor) -> torch.Tensor:
            return self._choose(logits, temperature, top_k, generator, top_p)

        outputs = []
        for start in range(0, len(prompts), self.batch_size):
            rows = [list(self._encode(p) or (self.eod_id,)) for p in prompts[start: start + self.batch_size]]
            new = generate_rows(self._engine, rows, max_new_tokens, self.eod_id, choose)
            outputs.extend(self.codec.decode(n) for n in new)
        self._engine.release()  # scoring runs next: its activations need the memory more
        return outputs

    # ---- bookkeeping ------------------------------------------------------------------------------
    def _agree(self, payload) -> None:
        """Fail (on every rank) unless every rank is about to do the same work."""
        digest = hashlib.sha256(repr(payload).encode()).hexdigest()
        digests = _all_gather(digest)
        if len(set(digests)) > 1:
            differ = [r for r, d in enumerate(digests) if d != digests[0]]
            raise RuntimeError(f"ranks {differ} would evaluate different requests than rank 0; parallel evaluation "
                               f"runs every rank in lock step and needs a deterministic request list")

    def describe(self) -> dict:
        mesh = self.mesh
        return {**super().describe(), "world_size": mesh.world_size,
                "parallel": {"tp": mesh.tp, "pp": mesh.pp, "dp": mesh.dp, "sequence_parallel": self.sequence_parallel}}


def _all_gather(value) -> list:
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def load_parallel(checkpoint: str | Path, overrides: list[str] = (), *, batch_size: int = 8, device: str = "cpu",
                  tokenizer_path: str | Path | None = None, dtype: str = "fp32") -> ParallelLM:
    """Collective: every rank of the (already initialised) world loads its chunk of `checkpoint`
    for the layout in `overrides` (parallel.tp / pp / dp / sequence_parallel / layer_partition)."""
    from trident.checkpoint.resume import apply_on_every_rank
    from trident.data.tokenizer import Tokenizer
    from trident.parallel.mesh import build_mesh, rank_device

    world = dist.get_world_size() if dist.is_initialized() else 1
    reader, config = checkpoint_layout(checkpoint, list(overrides), world)
    token_file = reader.path / "tokenizer.json"
    source = tokenizer_path or (token_file if token_file.exists() else None) or config.data.tokenizer
    if not source:
        raise FileNotFoundError(f"{checkpoint}: no tokenizer.json in the checkpoint and no data.tokenizer in "
                                f"its config; pass --tokenizer PATH")
    tokenizer = Tokenizer.load(source)
    p = config.parallel
    mesh = build_mesh(p.tp, p.pp, p.dp, p.timeout_s)
    target = rank_device(device)
    model = parallelize(config, mesh, target, Precision(dtype, target), optimizer=False)
    # each rank reads only its slices; a damaged one stops every rank at once
    apply_on_every_rank(reader, lambda r: model.load_pieces(r, kinds=("weight",)))
    parameters = sum(torch.Size(reader.full_shape(name)).numel() for name in reader.names("model"))
    resolved = reader.path.resolve()
    info = {"kind": "trident", "name": f"{resolved.parent.parent.name}/{resolved.name}",
            "checkpoint": str(resolved), "parameters": parameters, "dtype": dtype}
    return ParallelLM(model, tokenizer, batch_size=batch_size, info=info)
