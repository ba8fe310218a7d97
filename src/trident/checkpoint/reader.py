"""Checkpoints: safetensors shards + a JSON manifest, written atomically, loadable in any layout.

Layout of OUT/checkpoints/step_0000100/:
  model-dp{d}-pp{p}-tp{t}.safetensors   this rank's model shards, keyed by global parameter name
  optim-dp{d}-pp{p}-tp{t}.safetensors   Adam state (and fp32 master when training in bf16/fp16) of
                                        the flat ranges this rank owns ("name/exp_avg/START", ...)
  rng-rank{r}.safetensors               every rank's RNG streams (for exact resume)
  manifest-rank{r}.json                 per tensor: file, global name, full shape, slice offsets
  trainer_state.json                    step, consumed samples/tokens, scaler, config (rank 0)
  COMPLETE                              written last; a folder without it is never loaded
A checkpoint is written to a temporary folder, fsynced, renamed into place, then `latest` updated;
with async_save the files are written by a background thread from CPU copies taken at save time.
Loading trusts only COMPLETE markers (`latest` is a convenience pointer for people and scripts).
Loading assembles each parameter's slice from whichever files hold it, so the saving and loading
layouts need not match. Nothing is unpickled: tensors come from safetensors, the rest is JSON.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import save_file

from trident.model.gpt import full_shape
from trident.train.launch import barrier
from trident.train.integrity import CheckpointError, file_digest, read_manifest, verify_files

COMPLETE = "COMPLETE"


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:07d}"


def _slice_entry(file: str, key: str, param: torch.Tensor, offsets: list[int], shape: tuple) -> dict:
    return {"file": file, "key": key, "full_shape": list(shape), "offsets": offsets, "shape": list(param.shape)}


def shard_offsets(param: torch.nn.Parameter) -> list[int]:
    offsets = [0] * param.ndim
    if getattr(param, "tp_dim", None) is not None:
        offsets[param.tp_dim] = param.tp_rank * param.shape[param.tp_dim]
    return offsets


def _fsync_dir(path: Path) -> None:
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


def _cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", torch.float32, copy=True).contiguous()


def snapshot(named_params: list, optimizer_pieces: list[dict], mesh) -> tuple[dict, dict, list[dict]]:
    """CPU copies of this rank's model shards and optimizer pieces, plus their manifest entries.
    Taken synchronously, so training may change the live tensors while the files are written."""
    tag = f"dp{mesh.dp_rank}-pp{mesh.pp_rank}-tp{mesh.tp_rank}"
    model, optim, entries = {}, {}, []
    if mesh.dp_rank == 0:  # model replicas across DP are identical: one copy is enough
        for name, param in named_params:
            model[name] = _cpu(param)
            entries.append(_slice_entry(f"model-{tag}.safetensors", name, param, shard_offsets(param),
                                        full_shape(param)) | {"name": name, "kind": "model"})
    for piece in optimizer_pieces:
        for kind in ("exp_avg", "exp_avg_sq", "master"):
            if kind in piece:
                key = f"{piece['name']}/{kind}/{piece['flat'][0]}"
                optim[key] = _cpu(piece[kind])
                entries.append({"file": f"optim-{tag}.safetensors", "key": key, "name": piece["name"], "kind": kind,
                                "full_shape": piece["full_shape"], "offsets": piece["offsets"],
                                "shape": piece["shape"], "flat": piece["flat"],
                                "copy": f"pp{mesh.pp_rank}-tp{mesh.tp_rank}"})  # tied copies stay apart
    return model, optim, entries


class CheckpointWriter:
    """Writes checkpoints, synchronously or in a background thread (`async_save`).

    Every rank writes its own files into a shared temporary folder and drops a `done-rank{r}`
    marker; rank 0 waits for all markers, then fsyncs, renames the folder into place, writes
    COMPLETE and points `latest` at it. No collective runs in the background thread."""

    def __init__(self, root: Path, mesh, keep_last: int = 3, async_save: bool = False, timeout_s: float = 3600):
        self.root, self.mesh, self.keep_last, self.async_save = Path(root), mesh, keep_last, async_save
        self.timeout_s = timeout_s
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def save(self, step: int, named_params: list, optimizer_pieces: list[dict], rng: dict[str, torch.Tensor],
             trainer_state: dict, extra_files: dict[str, Path] | None = None) -> Path:
        """Collective. Returns the final folder (complete once `wait()` returns, for async saves)."""
        self.wait()
        tmp = self.root / f".tmp_step_{step:07d}_{_agree_nonce()}"
        model, optim, entries = snapshot(named_params, optimizer_pieces, self.mesh)
        rng = {k: v.detach().cpu().clone() for k, v in rng.items()}
        args = (step, tmp, model, optim, entries, rng, trainer_state, extra_files or {})
        if self.async_save:
            self.thread = threading.Thread(target=self._run, args=args, name=f"checkpoint-{step}", daemon=True)
            self.thread.start()
        else:
            self._write(*args)
            barrier()
        return step_dir(self.root, step)

    def wait(self) -> None:
        """Block until this rank's pending background save is written (and, on rank 0, final)."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise RuntimeError(f"rank {self.mesh.rank}: background checkpoint save failed") from error

    def _run(self, *args) -> None:
        try:
            self._write(*args)
        except BaseException as error:  # surfaced by wait() in the training thread
            self.error = error

    def _write(self, step, tmp, model, optim, entries, rng, trainer_state, extra_files) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        tag = f"dp{self.mesh.dp_rank}-pp{self.mesh.pp_rank}-tp{self.mesh.tp_rank}"
        if model:
            save_file(model, tmp / f"model-{tag}.safetensors")
        if optim:
            save_file(optim, tmp / f"optim-{tag}.safetensors")
        save_file(rng, tmp / f"rng-rank{self.mesh.rank}.safetensors")
        files = [f"model-{tag}.safetensors"] * bool(model) + [f"optim-{tag}.safetensors"] * bool(optim)
        files.append(f"rng-rank{self.mesh.rank}.safetensors")
        manifest = {"rank": self.mesh.rank, "tensors": entries, "files": {f: file_digest(tmp / f) for f in files}}
        (tmp / f"manifest-rank{self.mesh.rank}.json").write_text(json.dumps(manifest))
        (tmp / f"done-rank{self.mesh.rank}").write_text("")
        if self.mesh.rank == 0:
            self._finalize(step, tmp, trainer_state, extra_files)

    def _finalize(self, step, tmp, trainer_state, extra_files) -> None:
        deadline = time.time() + self.timeout_s
        while len(list(tmp.glob("done-rank*"))) < self.mesh.world_size:
            if time.time() > deadline:
                raise TimeoutError(f"checkpoint {tmp}: not every rank wrote its shards within {self.timeout_s}s")
            time.sleep(0.05)
        layout = {"dp": self.mesh.dp, "pp": self.mesh.pp, "tp": self.mesh.tp, "world_size": self.mesh.world_size}
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state | {"layout": layout}, indent=1))
        for name, source in extra_files.items():
            shutil.copyfile(source, tmp / name)
        _fsync_dir(tmp)
        final = step_dir(self.root, step)
        remove_checkpoint(final)  # an older save of the same step
        os.replace(tmp, final)
        (final / COMPLETE).write_text(str(step))
        _fsync_dir(final)
        latest_tmp = self.root / ".latest.tmp"
        latest_tmp.write_text(final.name)
        os.replace(latest_tmp, self.root / "latest")
        prune_checkpoints(self.root, self.keep_last, protect=final)
        for stale in [*self.root.glob(".tmp_step_*"), *self.root.glob(".deleting_*")]:  # crash leftovers
            shutil.rmtree(stale, ignore_errors=True)


def save_checkpoint(root: Path, step: int, named_params: list, optimizer_pieces: list[dict],
                    rng: dict[str, torch.Tensor], trainer_state: dict, mesh, keep_last: int = 3,
                    extra_files: dict[str, Path] | None = None) -> Path:
    """Synchronous save (collective); see CheckpointWriter."""
    writer = CheckpointWriter(root, mesh, keep_last)
    return writer.save(step, named_params, optimizer_pieces, rng, trainer_state, extra_files)


def complete_checkpoints(root: Path) -> list[Path]:
    """Finished checkpoints under `root`, oldest first (folders without COMPLETE are ignored)."""
    root = Path(root)
    if not root.exists():
        return []
    found = [p for p in root.glob("step_*") if p.is_dir() and (p / COMPLETE).exists()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def remove_checkpoint(path: Path) -> None:
    """Delete a checkpoint folder so that no crash can leave it half-deleted but still marked
    complete: it is first renamed out of the step_* namespace (atomic), then removed."""
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
        if protect is None or old.resolve() != Path(protect).resolve():
            remove_checkpoint(old)


def resolve_checkpoint(load: str, root: Path) -> Path | None:
    """`auto`: the newest complete checkpoint under root (None if there is none); else the given path."""
    if not load:
        return None
    if load == "auto":
        found = complete_checkpoints(root)
        return found[-1] if found else None
    path = Path(load)
    if (path / COMPLETE).exists():
        return path
    found = complete_checkpoints(path) or complete_checkpoints(path / "checkpoints")  # a run's OUT works too
    if found:
        return found[-1]
    raise FileNotFoundError(f"checkpoint.load={load}: no complete checkpoint there (missing {COMPLETE} marker)")


def read_manifest_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable trainer state ({type(error).__name__}: {error})") from None


class CheckpointReader:
    """Reads any saved tensor's slice, whatever layout wrote it."""

    def __init__(self, path: Path, verify: bool = True):
        """Refuses (CheckpointError naming the file) an incomplete, truncated or corrupted
        checkpoint, or one whose manifests do not match its files, before anything is loaded."""
        self.path = Path(path)
        if not (self.path / COMPLETE).exists():
            raise FileNotFoundError(f"{self.path} is not a complete checkpoint (no {COMPLETE} marker)")
        self.entries: dict[tuple[str, str], list[dict]] = {}
        manifests = sorted(self.path.glob("manifest-rank*.json"))
        if not manifests:
            raise CheckpointError(f"{self.path}: no manifest-rank*.json files")
        for manifest_path in manifests:
            manifest = read_manifest(manifest_path)
            if verify:
                verify_files(self.path, manifest_path, manifest)
            for entry in manifest["tensors"]:
                self.entries.setdefault((entry["kind"], entry["name"]), []).append(entry)
        self.state = read_manifest_state(self.path / "trainer_state.json")
        self._handles: dict = {}

    def names(self, kind: str = "model") -> list[str]:
        return sorted({name for k, name in self.entries if k == kind})

    def full_shape(self, name: str, kind: str = "model") -> tuple[int, ...]:
        return tuple(self._pieces(kind, name)[0]["full_shape"])

    def _pieces(self, kind: str, name: str) -> list[dict]:
        if (kind, name) not in self.entries:
            raise KeyError(f"checkpoint {self.path} has no {kind} tensor '{name}'")
        return self.entries[(kind, name)]

    def read(self, name: str, kind: str = "model", offsets: list[int] | None = None,
             shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """The slice [offsets, offsets + shape) of the full tensor (the whole tensor by default)."""
        blocks = self._blocks(kind, name)
        full = tuple(blocks[0]["full_shape"])
        offsets = offsets or [0] * len(full)
        shape = tuple(shape or full)
        out = torch.empty(shape, dtype=torch.float32)
        covered = 0
        seen = set()
        for block in blocks:
            region = self._overlap(block, offsets, shape)
            key = (tuple(block["offsets"]), tuple(block["shape"]))
            if region is None or key in seen:  # identical replicas (e.g. tied copies) are read once
                continue
            seen.add(key)
            src_index = tuple(slice(lo - p, hi - p) for (lo, hi), p in zip(region, block["offsets"]))
            dst_index = tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(region, offsets))
            out[dst_index] = block["load"](src_index)
            covered += math.prod(hi - lo for lo, hi in region)
        if covered != out.numel():
            raise ValueError(f"checkpoint {self.path}: {kind} tensor '{name}' slice {offsets}+{list(shape)} is "
                             f"not fully covered by the saved shards ({covered} of {out.numel()} elements)")
        return out

    def _blocks(self, kind: str, name: str) -> list[dict]:
        """Rectangular blocks of the full tensor, each with a loader; ZeRO-1 pieces (flat ranges of
        one TP-local block, spread over DP ranks) are joined back into their block first."""
        blocks, flat_groups = [], {}
        for piece in self._pieces(kind, name):
            if "flat" in piece:
                key = (tuple(piece["offsets"]), tuple(piece["shape"]), piece.get("copy", ""))
                flat_groups.setdefault(key, []).append(piece)
            else:
                blocks.append(piece | {"load": self._file_loader(piece)})
        for (offsets, shape, _), pieces in flat_groups.items():
            blocks.append({"offsets": list(offsets), "shape": list(shape), "full_shape": pieces[0]["full_shape"],
                           "load": self._flat_loader(kind, name, shape, pieces)})
        return blocks

    def _open(self, file: str):
        """One open (memory-mapped) handle per shard file for the reader's lifetime."""
        if file not in self._handles:
            self._handles[file] = safe_open(self.path / file, framework="pt")
        return self._handles[file]

    def _file_loader(self, piece: dict):
        def load(index):
            handle = self._open(piece["file"])
            return handle.get_slice(piece["key"])[index] if index else handle.get_tensor(piece["key"])
        return load

    def _flat_loader(self, kind: str, name: str, shape: tuple, pieces: list[dict]):
        def load(index):
            flat = torch.empty(math.prod(shape), dtype=torch.float32)
            filled, seen = 0, set()
            for piece in pieces:
                if tuple(piece["flat"]) in seen:  # the same range saved by two replicas
                    continue
                seen.add(tuple(piece["flat"]))
                lo, hi = piece["flat"]
                flat[lo:hi] = self._open(piece["file"]).get_tensor(piece["key"])
                filled += hi - lo
            if filled != flat.numel():
                raise ValueError(f"checkpoint {self.path}: {kind} of '{name}' has {filled} of {flat.numel()} "
                                 f"elements across its ZeRO slices")
            return flat.view(shape)[index]
        return load

    @staticmethod
    def _overlap(piece: dict, offsets: list[int], shape: tuple) -> list[tuple[int, int]] | None:
        region = []
        for p_off, p_len, off, length in zip(piece["offsets"], piece["shape"], offsets, shape):
            lo, hi = max(p_off, off), min(p_off + p_len, off + length)
            if lo >= hi:
                return None
            region.append((lo, hi))
        return region

    def rng(self, rank: int) -> dict[str, torch.Tensor] | None:
        path = self.path / f"rng-rank{rank}.safetensors"
        if not path.exists():
            return None
        with safe_open(path, framework="pt") as handle:
            return {key: handle.get_tensor(key) for key in handle.keys()}


@torch.no_grad()
def load_model_weights(reader: CheckpointReader, named_params: list) -> None:
    """Copy each parameter's slice (as this layout shards it) from the checkpoint, after checking
    that the checkpoint holds every parameter at this model's full shape."""
    saved = set(reader.names("model"))
    for name, param in named_params:
        if name not in saved:
            raise CheckpointError(f"{reader.path}: no tensor '{name}' for this model (was it saved from a "
                                  f"model with another model.num_layers?)")
        if reader.full_shape(name) != full_shape(param):
            raise CheckpointError(f"{reader.path}: '{name}' has full shape {list(reader.full_shape(name))}, this "
                                  f"model needs {list(full_shape(param))} (model config differs)")
    for name, param in named_params:
        param.copy_(reader.read(name, "model", shard_offsets(param), tuple(param.shape)).to(param.dtype))


def load_for_inference(path: str | Path, device: str = "cpu"):
    """(model, tokenizer, config) from a checkpoint of any layout, as one process in eval mode."""
    from trident.config import config_from_dict
    from trident.data.tokenizer import Tokenizer
    from trident.model.gpt import GPT

    reader = CheckpointReader(resolve_checkpoint(str(path), Path(path)) or Path(path))
    config = config_from_dict(reader.state["config"])
    tokenizer_file = reader.path / "tokenizer.json"
    tokenizer = Tokenizer.load(tokenizer_file) if tokenizer_file.exists() else None
    vocab = reader.full_shape("embedding.word.weight")[0]
    model = GPT(config.model, vocab)
    load_model_weights(reader, list(model.named_parameters()))
    return model.to(device).eval(), tokenizer, config
