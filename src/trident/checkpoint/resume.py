"""Loading a checkpoint on every rank at once, each rank reading only its own slices, with the
ranks agreeing on the outcome: `checkpoint.load=auto` falls back past a damaged newest checkpoint
only when every rank falls back together (a damaged tile is seen only by the ranks that read it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch.distributed as dist

from trident.checkpoint.integrity import CheckpointError, DamagedCheckpoint
from trident.checkpoint.reader import CheckpointReader, complete_checkpoints, resolve_checkpoint

DAMAGED, REFUSED = "damaged", "refused"


def _attempt(path: Path, apply: Callable[[CheckpointReader], None]) -> tuple[CheckpointReader | None, tuple | None]:
    """(reader, None) once `apply` loaded this rank's part; (None, (kind, message)) when it failed."""
    try:
        reader = CheckpointReader(path, verify="loaded")
    except CheckpointError as error:  # manifests unreadable, of an unknown version, or not matching the files
        return None, (DAMAGED, str(error))
    try:
        apply(reader)
    except CheckpointError as error:  # damaged, or intact but not fitting this model
        reader.close()
        return None, (DAMAGED if isinstance(error, DamagedCheckpoint) else REFUSED, str(error))
    return reader, None


def apply_on_every_rank(reader: CheckpointReader, apply: Callable[[CheckpointReader], None]) -> None:
    """Collective: `apply(reader)` on every rank (each loading its own slices); if it failed on any
    rank, every rank raises the first such rank's error, so none is left waiting in a collective."""
    try:
        apply(reader)
        outcome = None
    except CheckpointError as error:
        outcome = (DAMAGED if isinstance(error, DamagedCheckpoint) else REFUSED, str(error))
    failed = [o for o in _agree(outcome) if o is not None]
    if failed:
        kind, message = failed[0]
        raise (DamagedCheckpoint if kind == DAMAGED else CheckpointError)(message)


def _agree(outcome: tuple | None) -> list[tuple | None]:
    """Every rank's outcome, in rank order (collective when there are several ranks)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [outcome]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, outcome)
    return gathered


def load_checkpoint(load: str, root: Path, apply: Callable[[CheckpointReader], None],
                    log=print) -> CheckpointReader | None:
    """Collective. Open the checkpoint `load` names ("auto": the newest complete one under `root`)
    and `apply(reader)` to load this rank's part; returns the reader (None: nothing to load).
    A damaged tile any rank reads makes every rank refuse that checkpoint: with `auto` all ranks
    log one line and try the next older one; a path given explicitly fails (CheckpointError).
    A checkpoint that does not fit the model is refused on every rank, never skipped."""
    if load == "auto":
        candidates = list(reversed(complete_checkpoints(root)))
    else:
        path = resolve_checkpoint(load, root)
        candidates = [path] if path is not None else []
    for path in candidates:
        reader, outcome = _attempt(path, apply)
        outcomes = [o for o in _agree(outcome) if o is not None]
        refused = [message for kind, message in outcomes if kind == REFUSED]
        if refused:
            raise CheckpointError(refused[0])
        if not outcomes:
            return reader
        if load != "auto":
            raise CheckpointError(outcomes[0][1])
        log(f"checkpoint {path.name} skipped, an older one is tried: {outcomes[0][1]}")
    if candidates:
        raise CheckpointError(f"checkpoint.load=auto: no checkpoint under {root} verifies "
                              f"({len(candidates)} complete, all damaged; see the lines above)")
    return None
