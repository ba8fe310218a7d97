"""Writing checkpoints atomically (format.py describes the files), and removing old ones.

A checkpoint is written to a temporary folder, fsynced, renamed into place, then COMPLETE written
and `latest` updated; with async_save the files are written by a background thread from CPU copies
taken at save time. A crash at any point leaves no folder that counts as a checkpoint.

On an object store (`checkpoint.dir` an s3://... URL) there are no folders to rename: rank 0 first
clears the step's prefix (its COMPLETE first), every rank writes its objects in place (each object
appears whole or not at all), and COMPLETE, written last, is the commit.

Host memory: a save copies this rank's tensors to host memory once, in their own dtype (weights in
the training dtype, optimizer state in fp32), and streams each file from those copies in bounded
chunks (tensorfile.CHUNK_BYTES), digesting files and tiles on the way (no file is read back). From a
GPU the copies are non-blocking, into pinned memory, with one event after the last: save() returns
once they are queued (training goes on; the stream orders them before any later update), and the
files are written once the event has passed.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trident.checkpoint import format as fmt
from trident.checkpoint.reader import complete_checkpoints
from trident.checkpoint.tensorfile import DTYPES, write_tensors
from trident.checkpoint.tiles import piece_digests, tile_shape
from trident.parallel.mesh import barrier, layout_of
from trident.parallel.state import ADAM_KINDS, VALUE_KINDS, StatePiece, by_kind
from trident.text.atomic import write_text_atomic
from trident.text.storage import is_remote, location, make_folder, remove_tree
from trident.text.store_errors import StoreError, store_operation


class SaveError(RuntimeError):
    """A checkpoint could not be written (disk full, no permission, a path that is not a folder...)."""


def _fsync_dir(path: Path) -> None:
    if is_remote(path):
        return  # an object is durable once its upload completes
    for file in path.iterdir():
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _agree_nonce() -> str:
    """One id for this save attempt on every rank, so a crashed attempt's files are never mixed in."""
    nonce = [f"{time.time_ns():x}"]
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(nonce, src=0)
    return nonce[0]


def _host(tensor: torch.Tensor) -> torch.Tensor:
    """The one host copy of a tensor a save makes, in the tensor's own dtype (nothing stored twice:
    bf16 weights stay bf16, their fp32 masters live in the optimizer state). From CUDA: queued, into
    pinned memory (complete once snapshot's event has passed)."""
    if tensor.device.type != "cuda":
        return tensor.detach().to("cpu", copy=True).contiguous()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor.detach(), non_blocking=True)
    return host


def _copies_done(pieces: list[StatePiece]):
    """An event after the copies snapshot queued from CUDA (None when nothing was on CUDA)."""
    if not any(piece.tensor is not None and piece.tensor.device.type == "cuda" for piece in pieces):
        return None
    event = torch.cuda.Event()
    event.record()
    return event


def snapshot(pieces: list[StatePiece], mesh) -> tuple[dict, dict, dict, list[dict], object]:
    """Host copies of this rank's primary weight pieces (training dtype), Adam pieces (fp32) and RNG
    streams, their manifest entries, and the event after the copies (None: they are done). The
    copies are taken before training goes on (queued on the stream that updates the live tensors),
    so training may change those while the files are written."""
    model, optim, entries = {}, {}, []
    for piece in by_kind(pieces, "weight"):
        if piece.primary:  # replicas across DP are identical: one copy is enough
            model[piece.name] = _host(piece.tensor)
            entries.append(fmt.model_entry(fmt.model_file(mesh), piece))
    for piece in by_kind(pieces, *ADAM_KINDS):
        if piece.primary:
            optim[fmt.optimizer_key(piece)] = _host(piece.tensor)
            entries.append(fmt.optimizer_entry(fmt.optim_file(mesh), piece, copy=f"pp{mesh.pp_rank}-tp{mesh.tp_rank}"))
    rng = {piece.name: _host(piece.tensor) for piece in by_kind(pieces, "rng")}
    return model, optim, rng, entries, _copies_done(pieces)


def model_values(pieces: list[StatePiece]) -> dict:
    """The JSON values among the pieces (loss scaler, optimizer step count), keyed as trainer_state.json keeps them."""
    return {piece.name: piece.value for piece in by_kind(pieces, *VALUE_KINDS)}


def describe(entry: dict, tensor: torch.Tensor, span: list[int]) -> dict:
    """A manifest entry completed with where its data lies in the file, its dtype, and its tiles' digests."""
    tile = tile_shape(entry["shape"], tensor.element_size())
    flat = entry.get("flat", (0, tensor.numel()))
    return entry | {"dtype": DTYPES[tensor.dtype], "span": span, "tile": tile,
                    "digests": piece_digests(tensor, entry["shape"], tuple(flat), tile)}


def save_plan(pieces: list[StatePiece], mesh) -> dict[str, int]:
    """Tensor bytes per file this rank writes at a save: what `snapshot` copies (under
    FakeTensorMode, e.g. in `trident rehearse`, the copies cost nothing)."""
    model, optim, rng, _, _ = snapshot(pieces, mesh)
    files = {fmt.model_file(mesh): model, fmt.optim_file(mesh): optim, fmt.rng_file(mesh.rank): rng}
    return {name: sum(t.numel() * t.element_size() for t in tensors.values())
            for name, tensors in files.items() if tensors}


class CheckpointWriter:
    """Writes checkpoints, synchronously or in a background thread (`async_save`).

    Every rank writes its own files into a shared temporary folder and drops a `done-rank{r}`
    marker; rank 0 waits for all markers, then fsyncs, renames the folder into place, writes
    COMPLETE and points `latest` at it. No collective runs in the background thread."""

    def __init__(self, root: Path, mesh, keep_last: int = 3, async_save: bool = False, timeout_s: float = 3600):
        self.root, self.mesh, self.keep_last, self.async_save = location(root), mesh, keep_last, async_save
        self.timeout_s = timeout_s  # how long rank 0 waits for the other ranks' files (parallel.timeout_s)
        self.thread: threading.Thread | None = None
        self.error: tuple[int, BaseException] | None = None  # (step, what failed) of a background save

    def save(self, step: int, pieces: list[StatePiece], trainer_state: dict,
             extra_files: dict[str, Path] | None = None, blocking: bool = False) -> Path:
        """Collective: this rank's state pieces (ParallelModel.state_pieces) and, from rank 0, the
        trainer's own values. Returns the final folder (complete once `wait()` returns, for async
        saves; `blocking` writes synchronously even with async_save, as a save before stopping must)."""
        self.wait()
        if is_remote(self.root):
            if self.mesh.rank == 0:
                with store_operation(fmt.step_dir(self.root, step), f"rank 0: clearing checkpoint step {step}"):
                    remove_checkpoint(fmt.step_dir(self.root, step))  # a crashed attempt's objects
            _agree_nonce()  # every rank waits for the prefix to be clear
            tmp = fmt.step_dir(self.root, step)
        else:
            tmp = self.root / f".tmp_step_{step:07d}_{_agree_nonce()}"
        model, optim, rng, entries, copied = snapshot(pieces, self.mesh)
        args = (step, tmp, model, optim, entries, rng, trainer_state | model_values(pieces), extra_files or {}, copied)
        if self.async_save and not blocking:
            self.thread = threading.Thread(target=self._run, args=args, name=f"checkpoint-{step}", daemon=True)
            self.thread.start()
        else:
            try:
                self._write(*args)
            except TimeoutError:  # silent ranks: already one line naming them
                raise
            except OSError as error:
                raise SaveError(self._failure(step, error)) from error
            barrier()
        return fmt.step_dir(self.root, step)

    def _failure(self, step: int, error: BaseException) -> str:
        return (f"rank {self.mesh.rank}: saving checkpoint {fmt.step_dir(self.root, step)} failed "
                f"({type(error).__name__}: {error})")

    def wait(self) -> None:
        """Block until this rank's pending background save is written (and, on rank 0, final)."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            (step, error), self.error = self.error, None
            if isinstance(error, StoreError):  # already one line with its own exit code
                raise error
            raise SaveError(f"background save: {self._failure(step, error)}") from error

    def _run(self, *args) -> None:
        try:
            self._write(*args)
        except BaseException as error:  # surfaced by wait() in the training thread
            self.error = (args[0], error)

    def _write(self, step, tmp, model, optim, entries, rng, trainer_state, extra_files, copied=None) -> None:
        if copied is not None:
            copied.synchronize()  # the host copies are complete
        # a store failing mid-save leaves this step without COMPLETE: load=auto takes the one before
        with store_operation(fmt.step_dir(self.root, step), f"rank {self.mesh.rank}: saving checkpoint step {step}"):
            self._write_files(step, tmp, model, optim, entries, rng, trainer_state, extra_files)

    def _write_files(self, step, tmp, model, optim, entries, rng, trainer_state, extra_files) -> None:
        make_folder(tmp)
        rank, files = self.mesh.rank, {}
        for name, tensors in ((fmt.model_file(self.mesh), model), (fmt.optim_file(self.mesh), optim)):
            if tensors:  # DP ranks > 0 hold no model copy; without ZeRO they hold no optimizer state either
                files[name], spans = write_tensors(tmp / name, tensors)
                entries = [describe(entry, tensors[entry["key"]], spans[entry["key"]]) if entry["file"] == name
                           else entry for entry in entries]
        files[fmt.rng_file(rank)], _ = write_tensors(tmp / fmt.rng_file(rank), rng)
        manifest = fmt.manifest(rank, entries, files)
        (tmp / fmt.manifest_file(rank)).write_text(json.dumps(manifest))
        (tmp / fmt.done_marker(rank)).write_text("")
        if rank == 0:
            self._finalize(step, tmp, trainer_state, extra_files)

    def _finalize(self, step, tmp, trainer_state, extra_files) -> None:
        deadline = time.time() + self.timeout_s
        while len(list(tmp.glob(fmt.done_marker("*")))) < self.mesh.world_size:
            if time.time() > deadline:
                missing = [r for r in range(self.mesh.world_size) if not (tmp / fmt.done_marker(r)).exists()]
                raise TimeoutError(f"checkpoint {tmp}: ranks {missing} did not write their shards within "
                                   f"{self.timeout_s}s (parallel.timeout_s): they probably died or hung")
            time.sleep(0.05)
        state = trainer_state | {"layout": layout_of(self.mesh), "format_version": fmt.FORMAT_VERSION}
        (tmp / fmt.TRAINER_STATE).write_text(json.dumps(state, indent=1))
        for name, source in extra_files.items():
            (tmp / name).write_bytes(location(source).read_bytes())
        _fsync_dir(tmp)
        final = fmt.step_dir(self.root, step)
        if not is_remote(self.root):  # remote: the objects were written in place
            remove_checkpoint(final)  # an older save of the same step
            os.replace(tmp, final)
        (final / fmt.COMPLETE).write_text(str(step))
        _fsync_dir(final)
        write_text_atomic(self.root / fmt.LATEST, final.name)
        prune_checkpoints(self.root, self.keep_last, protect=final)
        for stale in [*self.root.glob(".tmp_step_*"), *self.root.glob(".deleting_*")]:  # crash leftovers
            remove_tree(stale)


def save_checkpoint(root: Path, step: int, pieces: list[StatePiece], trainer_state: dict, mesh, keep_last: int = 3,
                    extra_files: dict[str, Path] | None = None) -> Path:
    """Synchronous save (collective); see CheckpointWriter."""
    writer = CheckpointWriter(root, mesh, keep_last)
    return writer.save(step, pieces, trainer_state, extra_files)


def remove_checkpoint(path: Path) -> None:
    """Delete a checkpoint folder so that no crash can leave it half-deleted but still marked
    complete: it is first renamed out of the step_* namespace (atomic), then removed. On an object
    store its COMPLETE goes first, so it stops counting before any other object is deleted."""
    path = location(path)
    if is_remote(path):
        (path / fmt.COMPLETE).unlink(missing_ok=True)
        remove_tree(path)
        return
    if not path.exists():
        return
    doomed = path.with_name(f".deleting_{path.name}_{time.time_ns():x}")
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def prune_checkpoints(root: Path, keep_last: int, protect: Path | None = None) -> None:
    """Delete all but the newest `keep_last` complete checkpoints; the newest, and `protect` (the
    one just written), are never deleted."""
    if keep_last <= 0:
        return
    for old in complete_checkpoints(root)[:-max(1, keep_last)]:
        if protect is None or str(old) != str(protect):
            remove_checkpoint(old)
