"""ZeRO-3: a unit's full parameters exist only while it computes.

A unit is one transformer block of a model chunk, or the chunk's other parameters (embedding, final
norm, output head: its "root"). The flat weights (param_buffers.py) keep only each rank's owned slice; here,
module hooks applied by `parallelize` decide when a unit's buckets are all-gathered and released:
  forward   the root before the chunk runs, each block just before its own forward; each released
            after its forward (the next block's all-gather is posted first, so it overlaps this
            block's compute);
  backward  a gradient hook on a unit's output gathers it again before its backward runs (and
            posts the all-gather of the unit whose backward comes next); the unit is released when
            the gradient of its input is computed (every op of the unit that reads the weights has
            run), or when every one of its parameters' gradients has been staged (data.py).
Autograd keeps what a forward saved of the weights (e.g. the transposed matrix a matmul's backward
reads) as views of the gathered buffer: a saved-tensors hook stores such a tensor as a reference
(bucket, offset, shape, strides) instead, and rebuilds it from the buffer gathered for the backward,
so nothing keeps a forward's gathered weights alive. Activation checkpointing recomputes a block
inside its backward, while it is gathered: hooks that run inside a backward (autograd's graph task
is set) neither release nor post anything. Every decision depends only on the model's structure,
so every rank of the shard group issues the same all-gathers in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from trident.parallel.data import GradBuffers
from trident.parallel.flat_layout import Bucket
from trident.parallel.param_buffers import ParamBuffers

ROOT = "root"


def in_backward() -> bool:
    """True inside autograd's backward (e.g. activation checkpointing's recompute)."""
    return torch._C._current_graph_task_id() != -1


def unit_keys(chunks: list) -> dict[int, tuple[int, str]]:
    """id(param) -> (chunk index, block index or ROOT): the unit each parameter is gathered with."""
    keys = {}
    for c, chunk in enumerate(chunks):
        for name, param in chunk.named_parameters():
            parts = name.split(".")
            keys[id(param)] = (c, parts[1] if parts[0] == "blocks" else ROOT)
    return keys


@dataclass
class Unit:
    buckets: list[Bucket]


@dataclass(frozen=True)
class SavedRef:
    """A tensor autograd saved that is a view of a unit's gathered parameters."""
    bucket: Bucket
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class ParamGather:
    """The hooks that gather each unit of `chunks` around its forward and backward (stage 3)."""

    def __init__(self, params: ParamBuffers, grads: GradBuffers, chunks: list):
        self.params = params
        self.by_storage: dict[int, Bucket] = {}  # storage of a gathered bucket -> the bucket
        self.saving = None  # the saved-tensors hooks of the chunk whose forward is running
        grads.on_released = self.release_bucket  # a bucket whose gradients are staged needs no weights
        keys = unit_keys(chunks)
        for c, chunk in enumerate(chunks):
            def unit(key, c=c) -> Unit:
                return Unit([b for b in params.layout.buckets if keys[id(b.params[0])] == (c, key)])
            root, blocks = unit(ROOT), [unit(key) for key in chunk.blocks]
            chunk.register_forward_pre_hook(partial(self._before, root, blocks[0] if blocks else None, True))
            chunk.register_forward_hook(partial(self._after, root, blocks[-1] if blocks else None, True))
            for i, block in enumerate(chunk.blocks.values()):
                following = blocks[i + 1] if i + 1 < len(blocks) else None
                block.register_forward_pre_hook(partial(self._before, blocks[i], following, False))
                block.register_forward_hook(partial(self._after, blocks[i], blocks[i - 1] if i else None, False,
                                                    done=following))

    # ---- gathering ------------------------------------------------------------------------------
    def gather(self, unit: Unit | None, wait: bool = True) -> None:
        """All-gather the unit's buckets (`wait=False`: post them, to be finished by a later gather)."""
        if unit is None:
            return
        for bucket in unit.buckets:
            self.params.gather(bucket, wait)
            if wait:
                self.by_storage[bucket.full.untyped_storage()._cdata] = bucket

    def release(self, unit: Unit) -> None:
        for bucket in unit.buckets:
            self.release_bucket(bucket)

    def release_bucket(self, bucket: Bucket) -> None:
        if bucket.full is not None:
            self.by_storage.pop(bucket.full.untyped_storage()._cdata, None)
        self.params.release(bucket)

    # ---- module hooks ---------------------------------------------------------------------------
    def _before(self, unit: Unit, following: Unit | None, chunk: bool, module, args) -> None:
        """Forward pre-hook: gather the unit, post the next one's all-gather; the unit is released
        again once its input's gradient exists (its backward has read the weights)."""
        self.gather(unit)
        if in_backward():  # activation checkpointing's recompute: the backward's gather holds it
            return
        self.gather(following, wait=False)
        x = args[0] if args else None
        if torch.is_grad_enabled() and isinstance(x, torch.Tensor) and x.requires_grad:
            x.register_hook(lambda grad: self.release(unit))
        if chunk and torch.is_grad_enabled():
            self.saving = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self.saving.__enter__()

    def _after(self, unit: Unit, backward_next: Unit | None, chunk: bool, module, args, output,
               done: Unit | None = None) -> None:
        """Forward hook: release the unit; before its backward, a hook on its output gathers it again
        (after releasing `done`, the unit whose input that output is: its backward has just run)."""
        if in_backward():
            return
        if chunk and self.saving is not None:
            self.saving.__exit__(None, None, None)
            self.saving = None
        self.release(unit)
        if torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(partial(self._before_backward, unit, backward_next, done))

    def _before_backward(self, unit: Unit, backward_next: Unit | None, done: Unit | None, grad) -> None:
        if done is not None:  # at most this unit and the next one's all-gather are held at once
            self.release(done)
        self.gather(unit)
        self.gather(backward_next, wait=False)

    # ---- what autograd saves of gathered weights ------------------------------------------------
    def _pack(self, tensor: torch.Tensor):
        key = tensor.untyped_storage()._cdata
        bucket = self.by_storage.get(key)
        if bucket is None or bucket.full is None or bucket.full.untyped_storage()._cdata != key:
            return tensor  # not gathered weights (a storage address is reused only after it is freed)
        return SavedRef(bucket, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))

    def _unpack(self, saved):
        if not isinstance(saved, SavedRef):
            return saved
        if saved.bucket.full is None:
            raise RuntimeError(f"ZeRO-3: bucket {saved.bucket.index}'s parameters were read by a backward before "
                               "they were gathered for it")
        return saved.bucket.full.as_strided(saved.shape, saved.stride, saved.offset)
