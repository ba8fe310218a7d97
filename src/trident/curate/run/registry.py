"""The stage registry's lookup: which module registers each built-in stage, a stage class by name,
and a stage built from a pipeline config's parameters (unknown or mistyped ones refused)."""
from __future__ import annotations

import importlib
import inspect
import types
import typing
from typing import Any

from trident.curate.document import CurateError
from trident.curate.stage import REGISTRY, Stage

# The built-in stages' modules, imported on first lookup: a pipeline imports only those of its own
# stages (all of them cost ~0.3 s of CPU, ftfy and the extractors mostly); a test checks this
# against the registrations.
BUILTIN_STAGES = {
    "extract": "trident.curate.extract.html", "clean": "trident.curate.extract.clean",
    "langid": "trident.curate.extract.langid", "site_lines": "trident.curate.filters.site_lines",
    "min_length": "trident.curate.filters.heuristics", "gopher_quality": "trident.curate.filters.heuristics",
    "gopher_repetition": "trident.curate.filters.heuristics", "c4_lines": "trident.curate.filters.heuristics",
    "quality": "trident.curate.filters.quality", "exact_dedup": "trident.curate.dedup.exact",
    "fuzzy_dedup": "trident.curate.dedup.fuzzy", "decontaminate": "trident.curate.decontaminate",
    "holdout": "trident.curate.filters.holdout",
}
STAGE_MODULES = tuple(dict.fromkeys(BUILTIN_STAGES.values()))  # every module that registers a built-in stage


def _import_stage_modules() -> None:
    for module in STAGE_MODULES:
        importlib.import_module(module)


def stage_class(name: str) -> type[Stage]:
    """The class registered as `name`; CurateError listing the known names otherwise."""
    if name not in REGISTRY and name in BUILTIN_STAGES:
        importlib.import_module(BUILTIN_STAGES[name])
    if name not in REGISTRY:
        _import_stage_modules()
    if name not in REGISTRY:
        raise CurateError(f"unknown stage {name!r}; known stages: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def registered_stages() -> dict[str, type[Stage]]:
    """All registered stages by name (imports the built-in stage modules)."""
    _import_stage_modules()
    return dict(REGISTRY)


def build_stage(name: str, params: dict[str, Any]) -> Stage:
    """Instantiate a registered stage; unknown or missing parameters raise CurateError naming them."""
    cls = stage_class(name)
    signature = inspect.signature(cls.__init__)
    accepted = [p for p in signature.parameters.values() if p.name != "self"]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted)
    allowed = {p.name for p in accepted if p.kind is not inspect.Parameter.VAR_KEYWORD}
    unknown = sorted(set(params) - allowed)
    if unknown and not takes_any:
        raise CurateError(f"stage {name!r}: unknown parameter(s) {unknown}; allowed: {sorted(allowed)}")
    _check_param_types(name, cls, params)
    try:
        return cls(**params)
    except (TypeError, ValueError) as err:
        raise CurateError(f"stage {name!r}: {err}") from err


_SCALARS = (bool, int, float, str, type(None))


def _check_param_types(name: str, cls: type, params: dict[str, Any]) -> None:
    """Parameters annotated with plain scalar types (int, float, bool, str, optional) get a value of
    that type (an int is a float too) or null, else CurateError naming the stage and the parameter."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - annotations that do not resolve are simply not checked
        return
    for key, value in params.items():
        hint = hints.get(key)
        kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        # containers, custom types, unannotated parameters and null (the stage's own "missing") are not checked
        if value is None or not all(kind in _SCALARS for kind in kinds):
            continue
        if not any(_is_kind(value, kind) for kind in kinds):
            wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)
            raise CurateError(f"stage {name!r}: parameter '{key}' must be {wanted}, got {value!r}")


def _is_kind(value: Any, kind: type) -> bool:
    if kind is float:
        return type(value) in (int, float)
    return type(value) is kind
