"""Generation on any TP x PP (x DP) layout: this rank's model chunks, their TP-sharded KV caches, and
one collective `run(plan)` per forward pass.

A pass goes stage to stage: the first stage embeds the plan's tokens at their absolute positions,
each stage runs its layers against its own slot caches and sends the activations [s, b, h] on; the
last stage turns its vocabulary slice of the logits into the next token of every row. Greedy rows
and log-probabilities are computed vocabulary-parallel (max, arg-max and sum-exp all-reduced over
TP, as in training's cross-entropy); only when a row samples, or asks for more than one
alternative, are that pass's next-token logits gathered over TP. The sampler (the last stage's TP
rank 0 of replica 0) draws with a per-sequence generator, then broadcasts the result table to every
rank, so all ranks agree on every token.

Two ways to drive it: lock step (every rank builds the same plans, as the parallel evaluator does)
and driver/followers (rank 0 builds plans and broadcasts them; the other ranks call `follow`).
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.distributed as dist

from trident.infer.generate import apply_bias, sample_next
from trident.infer.kv_cache import SlotCache, StepRows
from trident.infer.plan import LONG_COLUMNS, Plan, StepOutput
from trident.parallel.mesh import Mesh
from trident.parallel.tensor import gather_from_tp, vocab_parallel_scores

STOP = 1  # header kind telling followers to return


class Engine:
    def __init__(self, chunks: list, mesh: Mesh, *, vocab_size: int, slots: int, sequence_parallel: bool = False,
                 autocast=nullcontext, device: torch.device | str = "cpu"):
        if any(chunk.cfg.seq_length != chunks[0].cfg.seq_length for chunk in chunks):
            raise ValueError("every chunk must come from the same model")
        self.chunks, self.mesh, self.vocab_size, self.slots = chunks, mesh, vocab_size, slots
        self.cfg = chunks[0].cfg
        self.seq_length = self.cfg.seq_length
        self.multiple = mesh.tp if sequence_parallel and mesh.tp > 1 else 1
        self.tp = mesh.tp_context(sequence_parallel)
        self.autocast, self.device = autocast, torch.device(device)
        self.dtype = next(chunks[0].parameters()).dtype
        self.caches = [SlotCache(len(chunk.blocks), slots, self.seq_length) for chunk in chunks]
        self.generators: dict[int, torch.Generator] = {}
        self.sampler = (mesh.pp - 1) * mesh.tp  # global rank of replica 0's last stage, TP rank 0
        for chunk in chunks:
            chunk.eval()

    def release(self) -> None:
        """Free the KV-cache buffers (they grow again on the next pass)."""
        for cache in self.caches:
            for layer in cache.layers:
                layer.k = layer.v = None

    @classmethod
    def from_parallel(cls, model, vocab_size: int, slots: int) -> "Engine":
        """From a trident.parallel.parallelize.ParallelModel (this rank's chunks of a layout)."""
        return cls(model.chunks, model.mesh, vocab_size=vocab_size, slots=slots,
                   sequence_parallel=model.layout.sequence_parallel, autocast=model.precision.autocast,
                   device=model.device)

    @classmethod
    def single(cls, model, vocab_size: int, slots: int) -> "Engine":
        """From a whole GPT in this one process."""
        return cls([model], Mesh(), vocab_size=vocab_size, slots=slots, device=next(model.parameters()).device)

    @property
    def world(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    # ---- driving ------------------------------------------------------------------------------
    def run(self, plan: Plan, broadcast_plan: bool = False, choose=None) -> StepOutput:
        """Collective: one forward pass of `plan`; every rank gets the same StepOutput.
        broadcast_plan: rank 0 sends the plan to followers first. choose(logits [b, V]) -> ids [b]:
        one rule for the whole batch, run on the sampler (the parallel evaluator's shared generator)."""
        if broadcast_plan and self.world > 1:
            self._send_plan(plan)
        return self._run(plan, choose)

    def follow(self) -> None:
        """Followers: run every plan rank 0 broadcasts until it says stop."""
        while True:
            header = self._broadcast(torch.zeros(4, dtype=torch.long), 0)
            if int(header[0]) == STOP:
                return
            rows, width, bias_width = int(header[1]), int(header[2]), int(header[3])
            longs = self._broadcast(torch.zeros(rows, len(LONG_COLUMNS) + 2 * width, dtype=torch.long), 0)
            floats = self._broadcast(torch.zeros(rows, 2 + 2 * bias_width, dtype=torch.float64), 0)
            self._run(Plan(longs, floats), None)

    def stop_followers(self) -> None:
        if self.world > 1:
            self._broadcast(torch.tensor([STOP, 0, 0, 0], dtype=torch.long), 0)

    def _send_plan(self, plan: Plan) -> None:
        for tensor in (plan.header(), plan.longs, plan.floats):
            self._broadcast(tensor, 0)

    def _broadcast(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        """`tensor` from rank `src` on every rank, on the CPU; on a GPU through the device, which the group's
        NCCL carries (the default group there is cpu:gloo,cuda:nccl: its name is not "nccl", and a CPU
        tensor would take the host's gloo)."""
        if self.device.type == "cuda":
            moved = tensor.to(self.device).contiguous()
            dist.broadcast(moved, src=src)
            return moved.cpu()
        tensor = tensor.contiguous()
        dist.broadcast(tensor, src=src)
        return tensor

    # ---- one pass -------------------------------------------------------------------------------
    @torch.inference_mode()
    def _run(self, plan: Plan, choose) -> StepOutput:
        if plan.width % self.multiple:
            raise ValueError(f"plan width {plan.width} must be a multiple of {self.multiple} (sequence parallel)")
        logits = self._forward(plan)
        table = self._choose(plan, logits, choose) if logits is not None else None
        if table is not None:
            table = table.cpu()  # the pass's one copy to the host: [b, w, 2 + 2 top_n], not the logits
        shape = (plan.rows, plan.out_width, 2 + 2 * plan.top_n)
        if self.world > 1:
            if table is None or self.rank != self.sampler:
                table = torch.zeros(shape, dtype=torch.float64)
            table = self._broadcast(table, self.sampler)
        lasts = plan.column("last").tolist() if plan.any_echo else [0] * plan.rows
        return StepOutput(table, lasts)

    def _forward(self, plan: Plan) -> torch.Tensor | None:
        """Stage to stage through this rank's chunks; the logits [b, w, V/tp] on the last stage."""
        step = StepRows(plan.column("slot"), plan.positions, self.device)  # host values read on the host
        x, positions = plan.tokens.to(self.device, non_blocking=True), step.positions
        split = self.multiple
        for c, chunk in enumerate(self.chunks):
            self.caches[c].step = step
            if not chunk.pre_process:
                x = torch.empty(plan.width // split, plan.rows, self.cfg.hidden_size, dtype=self.dtype,
                                device=self.device)
                dist.recv(x, src=self._neighbour(c, -1))
            with self.autocast():
                x = chunk(x, cache=self.caches[c].layers, positions=positions)  # rotary blocks on every stage
            if not chunk.post_process:
                dist.send(x.to(self.dtype).contiguous(), dst=self._neighbour(c, +1))
        return x if self.chunks[-1].post_process else None

    def _neighbour(self, chunk: int, direction: int) -> int:
        """Global rank of the stage before (-1) or after (+1) virtual stage `chunk` of this rank."""
        stage = self.mesh.pp_rank + direction
        if stage < 0 or stage >= self.mesh.pp:  # wraps to the next (or previous) virtual chunk
            stage %= self.mesh.pp
        return self.mesh.stage_rank(stage)

    # ---- the next token -----------------------------------------------------------------------
    def _choose(self, plan: Plan, logits: torch.Tensor, choose) -> torch.Tensor | None:
        """The result table on the logits' device (on the sampler; None on the other TP ranks of the
        last stage): nothing the size of the vocabulary leaves the device, save a sampled row's logits
        for its CPU generator."""
        b = plan.rows
        lasts = plan.column("last").to(logits.device, non_blocking=True)  # no stream sync for a host copy
        if plan.any_echo:  # each position's target is the next fed token; the last one's is chosen below
            targets = torch.cat([plan.tokens[:, 1:], plan.tokens[:, :1]], dim=1).to(logits.device, non_blocking=True)
            at = lasts
        else:
            logits = logits[torch.arange(b, device=logits.device), lasts][:, None]
            targets = torch.zeros(b, 1, dtype=torch.long, device=logits.device)
            at = torch.zeros(b, dtype=torch.long, device=logits.device)
        if choose is not None or plan.any_sampled or plan.any_bias or plan.top_n > 1 or self.tp.size == 1:
            return self._choose_gathered(plan, logits, targets, at, choose)  # with one TP rank, nothing to gather
        return self._choose_vocab_parallel(plan, logits, targets, at)

    def _choose_vocab_parallel(self, plan: Plan, logits, targets, at) -> torch.Tensor | None:
        """Every row greedy, at most one alternative: nothing the size of the vocabulary crosses ranks."""
        rows = torch.arange(plan.rows, device=logits.device)
        _, argmax = vocab_parallel_scores(logits, targets, self.tp, self.vocab_size)
        targets[rows, at] = argmax[rows, at]
        logprob, _ = vocab_parallel_scores(logits, targets, self.tp, self.vocab_size)
        top_lp = vocab_parallel_scores(logits, argmax, self.tp, self.vocab_size)[0] if plan.top_n else None
        if self.tp.rank != 0:
            return None
        columns = [targets.double(), logprob.double()]
        if plan.top_n:
            columns += [argmax.double(), top_lp.double()]
        return torch.stack(columns, dim=-1)

    def _choose_gathered(self, plan: Plan, logits, targets, at, choose) -> torch.Tensor | None:
        full = gather_from_tp(logits.float(), self.tp, dim=-1)[..., : self.vocab_size]
        if self.tp.rank != 0:
            return None
        rows = torch.arange(plan.rows, device=full.device)
        last_logits = full[rows, at]  # [b, V]
        if plan.any_bias:  # penalties and logit_bias steer the choice; reported logprobs stay the model's
            last_logits = apply_bias(last_logits, plan.bias_ids, plan.bias_values)
        if choose is not None:
            chosen = choose(last_logits).to(full.device)
        elif not plan.any_sampled:
            chosen = last_logits.argmax(-1)
        else:
            chosen = torch.tensor([self._sample_row(plan, b, last_logits[b]) for b in range(plan.rows)],
                                  device=full.device)
        targets[rows, at] = chosen
        logp = full.double().log_softmax(-1)  # on the device: float64 for the reported log-probabilities
        columns = [targets.double(), logp.gather(-1, targets[..., None]).squeeze(-1)]
        if plan.top_n:
            top = logp.topk(plan.top_n, dim=-1)
            return torch.cat([torch.stack(columns, dim=-1), top.indices.double(), top.values], dim=-1)
        return torch.stack(columns, dim=-1)

    def _sample_row(self, plan: Plan, b: int, logits: torch.Tensor) -> int:
        temperature, top_p = float(plan.floats[b, 0]), float(plan.floats[b, 1])
        if temperature == 0:
            return int(logits.argmax())
        slot = int(plan.column("slot")[b])
        if int(plan.column("fresh")[b]) or slot not in self.generators:
            self.generators[slot] = torch.Generator().manual_seed(int(plan.column("seed")[b]))
        return int(sample_next(logits, temperature, int(plan.column("top_k")[b]), top_p, self.generators[slot]))
