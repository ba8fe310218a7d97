"""Evaluation tasks (readers of the published benchmark files, prompts, metrics), shared by the
evaluation harness and by curation's decontamination.

Task registry: name -> task object. `get_task("piqa")`, `TASK_NAMES` for help texts.
"""
from __future__ import annotations

from trident.tasks.anli import ANLI
from trident.tasks.base import MultipleChoiceTask, Task
from trident.tasks.files import TaskDataError
from trident.tasks.hans import HANS
from trident.tasks.hellaswag import HellaSwag
from trident.tasks.lambada import Lambada, LambadaCloze, LambadaGeneration
from trident.tasks.piqa import PIQA
from trident.tasks.race import RACE
from trident.tasks.superglue import RTE, BoolQ, WiC
from trident.tasks.triviaqa import TriviaQA
from trident.tasks.winogrande import WinoGrande

_FACTORIES = {
    "lambada": Lambada,
    "lambada_cloze": LambadaCloze,
    "piqa": PIQA,
    "hellaswag": HellaSwag,
    "winogrande": WinoGrande,
    "boolq": BoolQ,
    "rte": RTE,
    "wic": WiC,
    "anli_r1": lambda: ANLI(1),
    "anli_r2": lambda: ANLI(2),
    "anli_r3": lambda: ANLI(3),
    "hans": HANS,
    "race": RACE,
    "lambada_gen": LambadaGeneration,
    "triviaqa": TriviaQA,
}
ALIASES = {"lambada_openai": "lambada", "race_h": "race", "race-h": "race", "anli": "anli_r1,anli_r2,anli_r3"}
TASK_NAMES = tuple(_FACTORIES)


def expand(names: list[str]) -> list[str]:
    """Task names with aliases resolved and group names (anli) expanded, order kept, no repeats."""
    out: list[str] = []
    for name in names:
        for resolved in ALIASES.get(name.strip().lower(), name.strip().lower()).split(","):
            if resolved not in _FACTORIES:
                raise KeyError(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)} (aliases: {', '.join(ALIASES)})")
            if resolved not in out:
                out.append(resolved)
    return out


def get_task(name: str) -> Task:
    """A fresh task object for a registered name or alias (not a group such as anli)."""
    resolved = expand([name])
    if len(resolved) != 1:
        raise KeyError(f"{name!r} names a group of tasks ({', '.join(resolved)}); name one of them")
    return _FACTORIES[resolved[0]]()


__all__ = ["Task", "MultipleChoiceTask", "TaskDataError", "get_task", "expand", "TASK_NAMES"]
