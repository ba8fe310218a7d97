"""Ring attention: causal self-attention over a sequence split across the N ranks of a CP group.

Layout (parallel/context_chunks.py). The sequence is cut into 2N chunks; CP rank r holds chunks r and
2N-1-r, concatenated, so its local queries, keys and values are [b, heads, 2c, d] with c = S/(2N).

Ring. In N steps every rank sees every rank's K/V: at step i rank r computes with the K/V block of
rank j = (r - i) mod N, while already sending that block on to rank r+1 and receiving the next one from
rank r-1 (forward: (N-1) x 2 x |K| bytes sent per rank and call).

Log-sum-exp merge. A block of keys gives each query row a partial result o_b = softmax(s_b) v_b and
its log-sum-exp l_b = log sum_k exp(s_k), with s = q.k * scale. Two partials over disjoint key sets merge
exactly: l = log(exp(l_1) + exp(l_2)), o = exp(l_1 - l) o_1 + exp(l_2 - l) o_2. Starting from
(o, l) = (0, -inf) and merging every block gives softmax over all visible keys. Accumulation is fp32
whatever the input dtype; the output is cast back.

Causal balance. Chunk a sees chunk b fully when b < a, causally (lower triangle) when b == a, not at
all when b > a. With chunks (r, 2N-1-r) against the block of rank j (chunks j, 2N-1-j):
  * j == r: (r, r) causal, (2N-1-r, r) full, (2N-1-r, 2N-1-r) causal: as chunk r comes before chunk
            2N-1-r, that is the plain causal mask over the 2c local tokens, one causal block;
  * j <  r: both local chunks see chunk j fully and chunk 2N-1-j not at all: [2c x c] full;
  * j >  r: only chunk 2N-1-r sees anything, and sees both chunks fully:       [c x 2c] full.
Every step is about 2c^2 scores on every rank (the first: half of (2c)^2), so no rank waits for another
(a plain split into N contiguous pieces would give rank N-1 2N-1 times the scores of rank 0).

Backward, also a ring. Each block's probabilities are recomputed from the saved final log-sum-exp:
p = exp(s - l); with D = rowsum(dO * O): dV_b = p^T dO, dS = p * (dO V_b^T - D), dQ += dS K_b * scale,
dK_b = dS^T Q * scale. A block's dK/dV (fp32) follow it around the ring: each rank adds its part to
the sum arriving from the previous rank (received while it computed) and sends it on; after N hops the
gradient is home. Backward sends (N-1) x 2 x |K| bytes of K/V plus N x 2 x |K|_fp32 of dK/dV per rank.

Blocks (parallel/context_blocks.py) are computed by torch's fused attention kernels, which return l_b
and take the final l back in their backward (CPU flash in fp32 on CPU; flash or memory-efficient
attention on CUDA, in the input dtype with fp32 accumulation), or by plain fp32 matmuls elsewhere; they are
tested equal to SDPA, and to torch's own ring attention (torch.distributed.tensor.experimental). The ring
switches autocast off inside, forward and backward: under bf16 autocast the matmul path's scores were
rounded to bf16 before their log-sum-exp while its backward recomputed them in fp32 (issue 59).
Recomputing under torch.utils.checkpoint runs the forward ring again (its bytes again). Grouped-query
attention: query head i reads key/value head i // (hq / hkv), as SDPA's enable_gqa.
Every wait on an exchange is a flight-recorder event ("ring attention forward step 2/4", peer: the
global rank received from), so a hang's dump names the ring step and whom it waits for.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from trident.parallel.context_blocks import block_backward, block_dtype, block_forward, block_kernel, block_tiles, merge
from trident.parallel.watch import watched


@dataclass
class RingTraffic:
    """Bytes this process has sent around context-parallel rings, by pass (== layout_rules.ring_attention_bytes);
    reset() between measurements."""
    forward_bytes: int = 0
    backward_bytes: int = 0

    def reset(self) -> None:
        self.forward_bytes = self.backward_bytes = 0

    def add(self, phase: str, tensor: torch.Tensor) -> None:
        """Count `tensor` as sent in `phase` ("forward" or "backward")."""
        name = f"{phase}_bytes"
        setattr(self, name, getattr(self, name) + tensor.numel() * tensor.element_size())


RING_TRAFFIC = RingTraffic()


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group, *, causal: bool = True,
                   enable_gqa: bool = False, scale: float | None = None) -> torch.Tensor:
    """Attention of this CP rank's queries [b, hq, s_local, d] over the whole sequence's keys and values,
    whose local part k, v [b, hkv, s_local, d] holds this rank's chunks (r, 2N-1-r) in that order.
    `group` is the CP process group, always named (None: the default group; a ring of one without
    torch.distributed). Equals F.scaled_dot_product_attention on the full sequence (is_causal=causal),
    cut back to this rank's tokens; differentiable."""
    if torch.compiler.is_compiling():  # point-to-point exchanges and Python loops: run eagerly inside a compiled block
        return _eager_ring_attention()(q, k, v, group, causal=causal, enable_gqa=enable_gqa, scale=scale)
    _check_shapes(q, k, v, enable_gqa)
    ring = _Ring(group)
    if causal and ring.size > 1 and q.size(2) % 2:
        raise ValueError(f"ring attention needs an even local length (two chunks per rank), got {q.size(2)}")
    return _RingAttention.apply(q, k, v, ring, causal, 1.0 / math.sqrt(q.size(-1)) if scale is None else scale)


_EAGER: list = []  # torch.compiler.disable(ring_attention), made by the first compiled block that calls it


def _eager_ring_attention():
    """ring_attention out of torch.compile's reach. Made when first needed, not as a decorator at import:
    torch.compiler.disable imports torch._dynamo, ~2 s of start-up for every process that imports the model,
    and only a compiled run (which has imported it already) needs it."""
    if not _EAGER:
        _EAGER.append(torch.compiler.disable(ring_attention))
    return _EAGER[0]


def step_blocks(rank: int, source: int, local_len: int, causal: bool) -> list[tuple]:
    """The blocks ring step with the K/V of CP rank `source` computes on CP rank `rank`: a list of
    (query rows, key rows, diagonal) with rows as slices of the local sequence; diagonal blocks are causal."""
    everything = slice(0, local_len)
    if not causal or source == rank:  # own block: local order is global order, so the causal mask is local
        return [(everything, everything, causal)]
    first, second = slice(0, local_len // 2), slice(local_len // 2, local_len)
    if source < rank:
        return [(everything, first, False)]
    return [(second, everything, False)]


def _check_shapes(q, k, v, enable_gqa: bool) -> None:
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4:
        raise ValueError(f"ring attention takes q [b, hq, s, d] and k, v [b, hkv, s, d] of one shape, "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if len({q.dtype, k.dtype, v.dtype}) > 1 or len({q.device, k.device, v.device}) > 1:
        raise ValueError(f"q, k, v must share a dtype and device, got {q.dtype}/{k.dtype}/{v.dtype} on "
                         f"{q.device}/{k.device}/{v.device}")
    if (q.size(0), q.size(2), q.size(3)) != (k.size(0), k.size(2), k.size(3)):
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch, length or head size")
    if q.size(1) != k.size(1) and not (enable_gqa and q.size(1) % k.size(1) == 0):
        raise ValueError(f"{q.size(1)} query heads and {k.size(1)} key/value heads need enable_gqa=True "
                         f"and a whole number of query heads per key/value head")


class _Ring:
    """This rank's place in the CP group and the point-to-point exchange with its neighbours."""

    def __init__(self, group):
        self.group = group
        distributed = dist.is_available() and dist.is_initialized()
        self.size = dist.get_world_size(group) if distributed else 1
        self.index = dist.get_rank(group) if distributed else 0
        if self.index < 0:
            raise ValueError(f"rank {dist.get_rank()} is not in the context-parallel group it was given")
        self.next, self.prev = (self.index + 1) % self.size, (self.index - 1) % self.size
        # the flight recorder and `trident diagnose` name peers by global rank
        self.prev_rank = dist.get_global_rank(group, self.prev) if distributed and group is not None else self.prev

    def source(self, step: int) -> int:
        """The CP rank whose K/V block this rank holds at ring step `step`."""
        return (self.index - step) % self.size

    def blocks(self, step: int, local_len: int, causal: bool) -> list[tuple]:
        """The (query rows, key rows, diagonal) blocks of ring step `step` on this rank (step_blocks)."""
        return step_blocks(self.index, self.source(step), local_len, causal)

    def post(self, tensors: list[torch.Tensor], phase: str, first_tag: int = 0) -> tuple[list, list]:
        """Send each tensor to the next rank and receive its like from the previous one (not waited);
        on a ring of one the tensors come straight back. One batch: NCCL pairs a rank's send and
        receive (two ranks both sending first would deadlock)."""
        if self.size == 1:
            return tensors, []
        received = [torch.empty_like(tensor) for tensor in tensors]
        ops = []
        for tag, (tensor, buffer) in enumerate(zip(tensors, received), start=first_tag):
            ops += [dist.P2POp(dist.isend, tensor, group=self.group, group_peer=self.next, tag=tag),
                    dist.P2POp(dist.irecv, buffer, group=self.group, group_peer=self.prev, tag=tag)]
            RING_TRAFFIC.add(phase, tensor)
        with watched(self.group):  # an error names the CP group
            return received, dist.batch_isend_irecv(ops)

    def wait(self, works: list, phase: str, step: int) -> None:
        """Wait for posted exchanges as a flight-recorder event naming the ring step and the rank
        received from, so a hang's dump says which step of which ring stopped."""
        if not works:
            return
        name = f"ring attention {phase} step {step + 1}/{self.size}"
        with watched(self.group, op=name, peer=self.prev_rank) as watch:
            for work in works:
                watch.wait(work)  # the event ends when the exchange has, not when NCCL has queued it


def _forward_steps(ring: _Ring, q, kv, scale: float, causal: bool, kernel: str | None):
    """fp32 (out [b, hq, s, d], lse [b, hq, s]) of this rank's queries (in the blocks' dtype) against
    every rank's kv."""
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:-1], -math.inf, dtype=torch.float32, device=q.device)
    for step in range(ring.size):
        pending, works = ring.post([kv], "forward") if step < ring.size - 1 else ([kv], [])
        k, v = kv.to(q.dtype).unbind(0)
        for rows, cols, offset in block_tiles(ring.blocks(step, q.size(2), causal), kernel):
            merge(out, lse, rows, *block_forward(q[..., rows, :], k[..., cols, :], v[..., cols, :], scale, offset,
                                                 kernel))
        ring.wait(works, "forward", step)
        kv = pending[0]
    return out, lse


def _backward_steps(ring: _Ring, q, kv, out, dout, lse, scale: float, causal: bool, kernel: str | None):
    """fp32 (dq [b, hq, s, d], dkv [2, b, hkv, s, d]) for this rank's queries and its own K/V; q, out and
    dout in the blocks' dtype."""
    delta = None if kernel else (dout * out).sum(-1)  # a kernel computes its own
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    arriving, grad_works = [None], []
    for step in range(ring.size):
        pending, works = ring.post([kv], "backward") if step < ring.size - 1 else ([kv], [])
        dkv = _block_gradients(ring, step, (q, out, dout, delta, lse), kv, dq, scale, (causal, kernel))
        ring.wait(grad_works, "backward", step)  # the block's dK/dV so far, received during the compute
        if arriving[0] is not None:
            dkv += arriving[0]
        # ... travel on with it: after N hops a block's gradient is home
        arriving, grad_works = ring.post([dkv], "backward", first_tag=1)
        ring.wait(works, "backward", step)
        kv = pending[0]
    ring.wait(grad_works, "backward", ring.size - 1)
    return dq, arriving[0]


def _block_gradients(ring: _Ring, step: int, saved: tuple, kv, dq, scale: float, mask: tuple):
    """This step's dK/dV of the K/V block held (fp32 [2, b, hkv, s, d]); adds its dQ part into dq.
    `saved`: (q, out, dout, delta, lse) of this rank's queries; `mask`: (causal, kernel)."""
    q, out, dout, delta, lse = saved
    causal, kernel = mask
    k, v = kv.to(q.dtype).unbind(0)
    dkv = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
    for rows, cols, offset in block_tiles(ring.blocks(step, q.size(2), causal), kernel):
        dq_block, dk_block, dv_block = block_backward(
            q[..., rows, :], k[..., cols, :], v[..., cols, :], out[..., rows, :], dout[..., rows, :],
            None if kernel else delta[..., rows], lse[..., rows], scale, offset, kernel)
        dq[..., rows, :] += dq_block
        dkv[0, ..., cols, :] += dk_block
        dkv[1, ..., cols, :] += dv_block
    return dkv


def _without_autocast(device: torch.device):
    """The ring picks its blocks' dtypes itself (block_dtype), forward and backward alike."""
    return torch.autocast(device.type, enabled=False) if torch.amp.is_autocast_available(device.type) else nullcontext()


def ring_forward(ring, q, k, v, causal: bool, scale: float):
    """(out in q's dtype, fp32 lse, the blocks' kernel) of the ring's forward, whatever autocast surrounds
    it. `ring`: a _Ring, or anything with its size, source, blocks, post and wait (tests/ring_fixtures.py)."""
    kernel = block_kernel(q)
    with _without_autocast(q.device):
        out, lse = _forward_steps(ring, q.to(block_dtype(q, kernel)), torch.stack([k, v]).contiguous(), scale,
                                  causal, kernel)
    return out.to(q.dtype), lse, kernel


def ring_backward(ring, saved: tuple, dout, causal: bool, scale: float, kernel: str | None):
    """(dq, dk, dv) in the inputs' dtypes from ring_forward's `saved` (q, k, v, out, lse) and dout."""
    q, k, v, out, lse = saved
    dtype = block_dtype(q, kernel)
    with _without_autocast(q.device):
        dq, dkv = _backward_steps(ring, q.to(dtype), torch.stack([k, v]).contiguous(), out.to(dtype), dout.to(dtype),
                                  lse, scale, causal, kernel)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring: _Ring, causal: bool, scale: float):
        out, lse, kernel = ring_forward(ring, q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.causal, ctx.scale, ctx.kernel = ring, causal, scale, kernel
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        return *ring_backward(ctx.ring, ctx.saved_tensors, dout, ctx.causal, ctx.scale, ctx.kernel), None, None, None
