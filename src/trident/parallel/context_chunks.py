"""Which tokens of a sequence each context-parallel rank holds: load-balanced causal chunks.

The sequence of length S is cut into 2N chunks of S/(2N) tokens (N = cp size); CP rank r holds chunk r
and chunk 2N-1-r, in that order, as Megatron core and torchtitan do. Under a causal mask the work of a
query chunk grows with its index, so pairing an early chunk with a late one gives every rank the same
attention work (see parallel/context.py). Everything that cuts a full-sequence tensor for a CP rank
(tokens, labels, loss masks, position ids) goes through `split_for_rank`; `join_rank_parts` and
`gather_sequence` put the pieces back in global order (tests, evaluation).
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def chunk_length(seq_len: int, cp: int) -> int:
    """Tokens in one of the 2*cp chunks; ValueError when `seq_len` does not cut into 2*cp equal chunks."""
    if cp < 1:
        raise ValueError(f"context parallel size must be >= 1, got cp={cp}")
    if seq_len <= 0 or seq_len % (2 * cp):
        raise ValueError(f"sequence length {seq_len} does not divide into 2 x cp = {2 * cp} equal chunks "
                         f"(context parallelism cuts each sequence into 2N load-balanced chunks for cp={cp}); "
                         f"choose a sequence length that is a multiple of {2 * cp}")
    return seq_len // (2 * cp)


def rank_chunks(cp: int, rank: int) -> tuple[int, int]:
    """The two chunk indices CP rank `rank` holds, in its local order: (rank, 2*cp - 1 - rank)."""
    if not 0 <= rank < cp:
        raise ValueError(f"context parallel rank {rank} is outside 0..{cp - 1} (cp={cp})")
    return rank, 2 * cp - 1 - rank


def rank_positions(seq_len: int, cp: int, rank: int) -> torch.Tensor:
    """Global positions of the seq_len/cp tokens CP rank `rank` holds, in its local order (LongTensor;
    at cp = 1 the whole sequence, of any length)."""
    return split_for_rank(torch.arange(seq_len), 0, cp, rank)


def split_for_rank(x: torch.Tensor, dim: int, cp: int, rank: int) -> torch.Tensor:
    """CP rank `rank`'s two chunks of the full-sequence tensor `x` along `dim`, concatenated
    (`x` itself when cp is 1)."""
    first, second = rank_chunks(cp, rank)
    if cp == 1:
        return x
    length = chunk_length(x.size(dim), cp)
    return torch.cat([x.narrow(dim, first * length, length), x.narrow(dim, second * length, length)], dim=dim)


def join_rank_parts(parts: list[torch.Tensor], dim: int) -> torch.Tensor:
    """The inverse of split_for_rank: `parts[r]` is rank r's piece; returns the sequence in global order."""
    if not parts:
        raise ValueError("join_rank_parts needs one piece per context-parallel rank, got none")
    local = parts[0].size(dim)
    if local % 2 or any(part.size(dim) != local for part in parts):
        raise ValueError(f"every rank's piece must hold the same even number of tokens along dim {dim}, "
                         f"got {[part.size(dim) for part in parts]}")
    length = local // 2
    firsts = [part.narrow(dim, 0, length) for part in parts]
    seconds = [part.narrow(dim, length, length) for part in reversed(parts)]  # chunk 2N-1-r for r = N-1..0
    return torch.cat(firsts + seconds, dim=dim)


def gather_sequence(x: torch.Tensor, dim: int, group=None) -> torch.Tensor:
    """All-gather each CP rank's piece `x` over `group` and return the full sequence in global order
    (no autograd: for tests and evaluation)."""
    world = dist.get_world_size(group)
    if world == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return join_rank_parts(parts, dim)
