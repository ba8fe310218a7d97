"""This rank's layout, computed once from (config, mesh): the values every part of a parallel run
derives from raw config keys (the sequence length activations have under sequence parallelism, the
padded vocabulary, this rank's layers and chunks, the ZeRO stage in effect), so that no part
derives them again. `parallelize` builds the model from it; ParallelModel, the trainer, the
parallel evaluator and checkpoints read it.
"""
from __future__ import annotations

from dataclasses import dataclass

from trident.parallel.layout_rules import sequence_split, zero_in_effect
from trident.parallel.mesh import layout_of
from trident.parallel.pipeline.schedules import partition_layers


@dataclass(frozen=True)
class RankLayout:
    tp: int
    pp: int
    dp: int
    world_size: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    virtual_stages: int
    schedule: str
    sequence_parallel: bool  # in effect: asked for and tp > 1
    zero_stage: int  # the ZeRO stage in effect: the one asked for, 0 with dp = 1
    seq_length: int
    hidden_size: int
    micro_batch_size: int
    padded_vocab_size: int  # the embedding's rows: a multiple of make_vocab_size_divisible_by x tp
    chunk_layers: tuple[range, ...]  # this rank's global layer indices, one range per model chunk
    record: dict  # what a checkpoint stores; resuming under the same record continues the RNG streams
    cp: int = 1  # context parallelism: each sequence split over cp ranks, seq_length / cp tokens per rank
    cp_rank: int = 0

    @property
    def zero(self) -> bool:
        """The optimizer state is sharded over the gradient group dp x cp (ZeRO stage 1 or higher in effect)."""
        return self.zero_stage >= 1

    @property
    def sequence_split(self) -> int:
        """How many parts sequence parallelism splits the activations' sequence into (1: none)."""
        return sequence_split(self.tp, self.sequence_parallel)

    def activation_shape(self, seq_length: int, micro_batch: int) -> tuple[int, int, int]:
        """[s, b, h] of the hidden states passed between stages for sequences of `seq_length` (of which
        a context-parallel rank holds seq_length / cp tokens)."""
        return seq_length // self.cp // self.sequence_split, micro_batch, self.hidden_size

    def is_first_chunk(self, chunk: int) -> bool:
        return self.pp_rank == 0 and chunk == 0

    def is_last_chunk(self, chunk: int) -> bool:
        return self.pp_rank == self.pp - 1 and chunk == self.virtual_stages - 1


def rank_layout(config, mesh) -> RankLayout:
    """The layout of `mesh`'s rank for `config` (a Config: model, parallel and train sections)."""
    m, p = config.model, config.parallel
    chunks = partition_layers(m.num_layers, mesh.pp, p.virtual_stages, p.layer_partition)[mesh.pp_rank]
    return RankLayout(tp=mesh.tp, pp=mesh.pp, dp=mesh.dp, world_size=mesh.world_size, tp_rank=mesh.tp_rank,
                      pp_rank=mesh.pp_rank, dp_rank=mesh.dp_rank, virtual_stages=p.virtual_stages,
                      schedule=p.schedule, sequence_parallel=sequence_split(mesh.tp, p.sequence_parallel) > 1,
                      zero_stage=zero_in_effect(p.zero_stage, mesh.dp * mesh.cp), seq_length=m.seq_length,
                      hidden_size=m.hidden_size, micro_batch_size=config.train.micro_batch_size,
                      padded_vocab_size=m.padded_vocab_size(mesh.tp), chunk_layers=tuple(chunks),
                      record=layout_of(mesh), cp=mesh.cp, cp_rank=mesh.cp_rank)
