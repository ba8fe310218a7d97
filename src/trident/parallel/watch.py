"""Naming the process group in which a collective or point-to-point exchange failed.

Gloo's errors ("Timed out waiting 5000ms for recv operation to complete", "Connection closed by
peer") do not say which group they came from. The few places that communicate wrap the call in
`watched(group)`: when it raises, the group's description (its `group_desc`, which `build_mesh`
sets to e.g. "tp group (ranks [0, 1])") is attached to the exception itself, so it survives
autograd re-raising a backward's error on the caller's thread. Nothing happens while calls succeed.

An asynchronous exchange is waited for with `watch.wait(work, timeout, on_gpu)`: on the CPU (gloo) with
the host-side bound, on a GPU without one (NCCL's wait only orders the stream; with a timeout it
busy-waits the host, and the group's own timeout bounds the op); the flight-recorder event stays open
until the work has completed (is_completed), so a hang's dump names the op still in flight (issue 59).
A watched op without a work (a synchronous collective) ends when a CUDA event recorded after it has
run, where CUDA is in use.
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from trident.parallel.flight import FLIGHT

_ATTRIBUTE = "trident_process_group"


class watched:
    """Context manager: an exception leaving the block is tagged with `group`'s description
    (`None` is the default group, as in torch.distributed calls). The innermost tag wins.
    With `op` (e.g. "all_reduce"), the call is also an event of the flight recorder (flight.py)."""

    __slots__ = ("group", "op", "peer", "event", "works")

    def __init__(self, group, op: str | None = None, peer: int | None = None):
        self.group, self.op, self.peer, self.event, self.works = group, op, peer, None, []

    def __enter__(self) -> "watched":
        if self.op is not None:
            self.event = FLIGHT.begin(self.op, _short_name(self.group), self.peer)
        return self

    def wait(self, work, timeout: timedelta | None = None, on_gpu: bool = False) -> None:
        """Wait for an async `work` (torch.distributed.Work); `timeout` bounds it on the host, on the CPU only.
        The event ends when the work has completed, not when this returns."""
        work.wait() if on_gpu or timeout is None else work.wait(timeout)
        if on_gpu:  # NCCL's wait returns once queued; gloo's once done (holding it would keep its tensors alive)
            self.works.append(work)

    def __exit__(self, kind, error, traceback) -> bool:
        if self.event is not None:
            FLIGHT.end(self.event, failed=error is not None, works=self.works or _gpu_marker())
        if error is not None and not hasattr(error, _ATTRIBUTE):
            try:
                setattr(error, _ATTRIBUTE, describe_group(self.group))
            except AttributeError:  # an exception type without a __dict__: left untagged
                pass
        return False


def _gpu_marker() -> list:
    """A CUDA event recorded on the current stream once the op is queued, where CUDA is in use: a
    synchronous collective's event then ends when the GPU has run it (NCCL returns when it is queued)."""
    if not torch.cuda.is_initialized():
        return []
    marker = torch.cuda.Event()
    marker.record()
    return [marker]


def _short_name(group) -> str:
    """The group's description without looking up ranks (cheap enough for every collective)."""
    return "default group" if group is None else getattr(group, "group_desc", "") or "group"


def describe_group(group) -> str:
    """The group's `group_desc` when it was given one (build_mesh does); otherwise its ranks."""
    world = group is None or group is dist.group.WORLD
    desc = "" if world else getattr(group, "group_desc", "")
    if desc and desc != "undefined":
        return desc
    try:
        ranks = dist.get_process_group_ranks(dist.group.WORLD if world else group)
    except (RuntimeError, ValueError):  # the group is already gone
        return "group (ranks unknown)"
    return f"{'default ' if world else ''}group (ranks {ranks})"


def failed_group(error: BaseException) -> str | None:
    """The description of the group whose communication raised `error` (or one of its causes)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if hasattr(error, _ATTRIBUTE):
            return getattr(error, _ATTRIBUTE)
        error = error.__cause__ or error.__context__
    return None
