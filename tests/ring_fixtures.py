"""A context-parallel ring of N ranks as N threads of one process (parallel/context.py's ring_forward and
ring_backward over queues instead of torch.distributed), so one device runs every block shape of a cp ring:
one GPU cannot hold two NCCL ranks, and gloo does not send CUDA tensors."""
from __future__ import annotations

import queue
import threading
from contextlib import nullcontext

import torch

from trident.parallel.context import ring_backward, ring_forward, step_blocks
from trident.parallel.context_chunks import join_rank_parts, split_for_rank

WAIT_S = 60  # a rank that waits longer for its peer has hit a bug, not a slow device


class ThreadRing:
    """Rank `index` of a ring of `size` threads: what parallel/context.py's _Ring does, through queues
    (inboxes[rank][tag]); a send is a copy taken when posted."""

    def __init__(self, index: int, size: int, inboxes: list):
        self.index, self.size, self.inboxes = index, size, inboxes
        self.next, self.prev_rank = (index + 1) % size, (index - 1) % size

    def source(self, step: int) -> int:
        return (self.index - step) % self.size

    def blocks(self, step: int, local_len: int, causal: bool) -> list[tuple]:
        return step_blocks(self.index, self.source(step), local_len, causal)

    def post(self, tensors: list, phase: str, first_tag: int = 0) -> tuple[list, list]:
        if self.size == 1:
            return tensors, []
        received = [torch.empty_like(tensor) for tensor in tensors]
        for tag, tensor in enumerate(tensors, start=first_tag):
            self.inboxes[self.next][tag].put(tensor.clone())
        return received, list(enumerate(received, start=first_tag))

    def wait(self, works: list, phase: str, step: int) -> None:
        for tag, buffer in works:
            buffer.copy_(self.inboxes[self.index][tag].get(timeout=WAIT_S))


def ring_in_threads(q, k, v, dout, cp: int, autocast_dtype=None):
    """The ring's output and (dq, dk, dv) over whole-sequence q, k, v [b, h, S, d] and output gradient dout,
    computed by cp threads (forward under autocast to `autocast_dtype` on q's device when given, backward
    outside it, as the trainer runs them), each rank's pieces joined back into the whole sequence."""
    inboxes = [[queue.Queue() for _ in range(2)] for _ in range(cp)]  # tag 0: K/V, tag 1: dK/dV
    results: list = [None] * cp

    def rank(index: int) -> None:
        try:
            local = [split_for_rank(t, 2, cp, index) for t in (q, k, v, dout)]
            ring, scale = ThreadRing(index, cp, inboxes), q.size(-1) ** -0.5
            autocast = torch.autocast(q.device.type, autocast_dtype) if autocast_dtype else nullcontext()
            with autocast:  # autocast is per thread: each rank enters it
                out, lse, kernel = ring_forward(ring, *local[:3], True, scale)
            grads = ring_backward(ring, (*local[:3], out, lse), local[3], True, scale, kernel)
            results[index] = (out, *grads)
        except BaseException as error:  # handed to the caller, which raises it
            results[index] = error

    threads = [threading.Thread(target=rank, args=(index,)) for index in range(cp)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=4 * WAIT_S)
    for index, result in enumerate(results):
        if not isinstance(result, tuple):
            raise RuntimeError(f"ring rank {index} of {cp} failed") from result
    return [join_rank_parts([result[i] for result in results], 2) for i in range(4)]
