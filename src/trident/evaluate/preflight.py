"""Every task x shot-count cell of an evaluation checked before the model scores anything.

`load_checked` reads each task's scored split and few-shot pool and checks that every shot count
can be drawn; all problems are gathered into one `PreflightError`, so a run that cannot finish
fails at its start (`trident eval` exits 2) instead of after scoring the cells before it.
"""
from __future__ import annotations

from pathlib import Path

from trident.evaluate import fewshot
from trident.tasks import Task, TaskDataError, expand, get_task


class PreflightError(TaskDataError):
    """A task/shot cell cannot be scored; raised before any scoring."""


def plan_cells(tasks: list[str] | None, shots: list[int] | dict[str, list[int]] | None,
               protocol: str | None = None) -> dict[str, list[int]]:
    """task -> its shot counts: one list for every task, a per-task dict, or a named protocol's."""
    if protocol is not None:
        from trident.evaluate.protocols import protocol_cells

        if tasks is not None or shots is not None:
            raise PreflightError(f"protocol {protocol!r} fixes the tasks and shot counts; give no tasks or shots")
        return protocol_cells(protocol)
    if not tasks:
        raise PreflightError("no tasks to evaluate: give tasks or a protocol")
    try:
        names = expand(tasks)
    except KeyError as error:
        raise PreflightError(error.args[0]) from None
    per_task = shots if isinstance(shots, dict) else {name: [0] if shots is None else shots for name in names}
    cells = {name: sorted(set(per_task.get(name, []))) for name in names}
    problems = [f"{name}: no shot counts" for name, ks in cells.items() if not ks]
    problems += [f"{name} {k}-shot: shot counts must be >= 0" for name, ks in cells.items() for k in ks if k < 0]
    if problems:
        raise PreflightError("; ".join(problems))
    return cells


def load_checked(cells: dict[str, list[int]], data_path: Path | None, limit: int | None,
                 construction: str) -> dict[str, tuple[Task, list[dict], fewshot.FewShotPool]]:
    """name -> (task, scored docs, few-shot pool) for every cell, or one PreflightError naming them all."""
    if construction not in fewshot.FEWSHOT_CONSTRUCTIONS:
        raise PreflightError(f"unknown few-shot construction {construction!r}; "
                             f"known: {', '.join(fewshot.FEWSHOT_CONSTRUCTIONS)}")
    loaded, problems = {}, []
    for name, ks in cells.items():
        task = get_task(name)
        try:
            all_docs = task.load(data_path, task.eval_split)
            # the pool is the whole split even under --limit (scored docs are its first N, same indices)
            pool = (fewshot.load_pool(task, data_path, all_docs) if max(ks) > 0
                    else fewshot.FewShotPool("", [], False))
        except TaskDataError as error:
            problems.append(f"{name} {','.join(map(str, ks))}-shot: {_without_task(str(error), name)}")
            continue
        problems += [why for k in ks if (why := fewshot.shortfall(task, pool, k, construction))]
        loaded[name] = (task, all_docs[:limit], pool)
    if problems:
        raise PreflightError("cannot evaluate, nothing was scored:\n  " + "\n  ".join(problems))
    return loaded


def _without_task(message: str, name: str) -> str:
    """The loader's message without its leading 'task: ' (the caller names the task and shots)."""
    return message[len(name) + 2:] if message.startswith(f"{name}: ") else message
