"""Exact step replay: re-run step N of a finished or stopped run from the checkpoint before it, on the
run's layout or any other (one CPU process included), and set the losses and gradient norms beside
the logged ones. metrics.jsonl's `samples` ([first global sample, count]) says what each step read;
data order, LR and batch ramp-up follow from the run's config and the checkpoint's counters, so the
same layout reproduces the run bit for bit (RNG streams restored) and another within reduction-order
rounding. Nothing is written into the run's folder.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from trident.checkpoint.reader import complete_checkpoints
from trident.config import ConfigError, load_config
from trident.parallel.mesh import layout_of
from trident.text.appended import log_exists
from trident.text.storage import location


def logged_steps(run: Path) -> dict[int, dict]:
    """step -> its metrics record (the last one written, for a step run again after a resume)."""
    from trident.train.metrics import read_metrics

    path = run / "metrics.jsonl"
    if not log_exists(path):  # the file, or on a store the parts a run that did not end cleanly left
        raise ConfigError(f"{path}: no metrics; is {run} the output folder of `trident train`?")
    return {r["step"]: r for r in read_metrics(path) if "step" in r}


def checkpoint_before(root: Path, step: int) -> Path | None:
    """The newest complete checkpoint of a step before `step` (None: replay from initialisation)."""
    earlier = [p for p in complete_checkpoints(root) if int(p.name.split("_")[1]) < step]
    return earlier[-1] if earlier else None


def replay_config(run: Path, step: int, overrides: list[str], world: int):
    config = load_config(run / "config.yaml", overrides)
    root = location(config.checkpoint.dir) if config.checkpoint.dir else run / "checkpoints"
    start = checkpoint_before(root, step)
    if start is None and config.checkpoint.load not in ("", "auto"):
        start = location(config.checkpoint.load)  # the run itself began from a checkpoint (e.g. fine-tuning)
    config.checkpoint.load = str(start) if start is not None else ""
    p = config.parallel
    model = p.pp * p.cp * p.tp
    ranks = p.dp * model or model  # dp 0 (inferred): the run took any multiple of pp x cp x tp
    if (world % model if p.dp == 0 else ranks != world) and not any(o.startswith("parallel.") for o in overrides):
        cp, one_cp = (f" cp={p.cp}", " parallel.cp=1") if p.cp > 1 else ("", "")
        raise ConfigError(f"the run used dp={p.dp} pp={p.pp}{cp} tp={p.tp}: replay it with --nproc {ranks}, "
                          f"or on {world} process(es) with e.g. parallel.dp=0 parallel.pp=1{one_cp} parallel.tp=1")
    return config, start


def replay(run: str | Path, step: int, overrides: list[str] | None = None, log=print) -> dict:
    """Collective: re-run steps up to `step`; on every rank, the comparison with the logged values."""
    import torch.distributed as dist

    from trident.train.trainer import Trainer

    run, overrides = location(run), list(overrides or [])
    logged = logged_steps(run)
    if step not in logged:
        raise ConfigError(f"{run / 'metrics.jsonl'} has no step {step} (steps {min(logged, default=0)}-"
                          f"{max(logged, default=0)})")
    world = dist.get_world_size() if dist.is_initialized() else 1
    config, start = replay_config(run, step, overrides, world)
    with tempfile.TemporaryDirectory(prefix="trident-replay-") as scratch:
        trainer = Trainer(config, scratch, log=log)
        rows = []
        while trainer.step < step:
            record = trainer.train_step()
            rows.append(_compare(record, logged.get(record["step"], {})))
    last = rows[-1]
    return {"run": str(run), "step": step, "from_checkpoint": str(start) if start else None,
            "layout": {k: v for k, v in layout_of(trainer.mesh).items() if k != "world_size"},  # cp when > 1
            "loss": last["loss"], "logged_loss": last["logged_loss"], "grad_norm": last["grad_norm"],
            "logged_grad_norm": last["logged_grad_norm"], "same_samples": last["same_samples"],
            "bit_exact": all(r["bit_exact"] for r in rows), "max_relative_difference": max(r["relative"] for r in rows),
            "steps": rows}


def _compare(record: dict, logged: dict) -> dict:
    pairs = [(record["loss"], logged.get("loss")), (record["grad_norm"], logged.get("grad_norm"))]
    relative = max((abs(a - b) / max(abs(b), 1e-12) for a, b in pairs if b is not None), default=float("nan"))
    return {"step": record["step"], "loss": record["loss"], "logged_loss": logged.get("loss"),
            "grad_norm": record["grad_norm"], "logged_grad_norm": logged.get("grad_norm"),
            "same_samples": logged.get("samples") in (None, record["samples"]),
            "bit_exact": all(a == b for a, b in pairs), "relative": relative}


def format_replay(result: dict) -> str:
    lines = [f"replayed step {result['step']} of {result['run']} from "
             f"{result['from_checkpoint'] or 'initialisation'} on dp={result['layout']['dp']} "
             f"pp={result['layout']['pp']} tp={result['layout']['tp']}",
             f"{'step':>6} {'loss':>14} {'logged loss':>14} {'grad norm':>12} {'logged':>12}"]
    for row in result["steps"]:
        lines.append(f"{row['step']:>6} {row['loss']:>14.8f} {row['logged_loss'] or float('nan'):>14.8f} "
                     f"{row['grad_norm']:>12.6f} {row['logged_grad_norm'] or float('nan'):>12.6f}")
    verdict = "bit-exact" if result["bit_exact"] else f"max relative difference {result['max_relative_difference']:.2e}"
    lines.append(f"{verdict}; samples {'as logged' if result['same_samples'] else 'DIFFER from the log'}")
    return "\n".join(lines)
