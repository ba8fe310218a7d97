"""The one mechanism behind every file trident reads as configuration (training configs, curation
pipelines, flow files): dataclasses filled from YAML mappings and dotted `key=value` overrides.

A field's annotation is its type (nested dataclasses are sections, `list[X]` checks every element,
`Union` tries each option); `setting(...)` says what a value must be and may add a check. A key no
dataclass has, or a value of the wrong type, raises ConfigError naming the key; defaults live only
in the dataclasses. Presets are the YAML files shipped in src/trident/configs.
"""
from __future__ import annotations

import dataclasses
import keyword
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Union

import yaml

from trident.config.suggest import closest, did_you_mean

PRESET_DIR = Path(__file__).parent.parent / "configs"  # src/trident/configs
_MISMATCH = object()  # what _convert returns for a value of the wrong type at its own level


class ConfigError(ValueError):
    """A configuration mistake; the message names the key and says what is allowed."""


def setting(what: str, check: Callable[[Any], bool] | None = None, **field_args) -> Any:
    """A dataclass field that says what its value must be (in the message of a wrong type or a failed
    `check`); `field_args` are dataclasses.field's (default=..., default_factory=...)."""
    return dataclasses.field(metadata={"what": what, **({"check": check} if check else {})}, **field_args)


def fill(obj: Any, values: dict, prefix: str = "", name: str = "config") -> Any:
    """Set `obj`'s fields from `values` (a nested mapping), in place; returns `obj`. Sections keep
    the defaults of keys not given. `name` says which kind of file the keys belong to."""
    fields = {f.name: f for f in dataclasses.fields(obj)}
    hints = typing.get_type_hints(type(obj))
    for given_name, value in values.items():
        key = f"{prefix}{given_name}"
        field_name = _field_name(given_name)  # a key that is a Python keyword (`from`) is the field `from_`
        if field_name not in fields:
            near = closest(field_name, fields)
            hint = f" (did you mean '{prefix}{near}'?)" if near else ""
            known = ", ".join(sorted(map(_key_name, fields)))
            raise ConfigError(f"unknown {name} key '{key}'{hint}; known keys here: {known}")
        current = getattr(obj, field_name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{name} key '{key}' is a section; give it a mapping, got {value!r}")
            fill(current, value, key + ".", name)
        else:
            setattr(obj, field_name, _checked_value(value, hints[field_name], key, name, fields[field_name].metadata))
    return obj


def _field_name(key: str) -> str:
    return f"{key}_" if keyword.iskeyword(key) else key


def _key_name(field_name: str) -> str:
    """The key a file gives for a dataclass field (`from_` is written `from`)."""
    return field_name[:-1] if field_name.endswith("_") and keyword.iskeyword(field_name[:-1]) else field_name


def _checked_value(value: Any, kind: Any, key: str, name: str, rule: typing.Mapping) -> Any:
    what = rule.get("what") or _describe(kind)
    converted = _convert(value, kind, key, name)
    if converted is _MISMATCH or ("check" in rule and not rule["check"](converted)):
        raise ConfigError(f"{name} key '{key}': expected {what}, got {value!r}")
    return converted


def _coerce(value: Any, kind: Any, key: str, name: str) -> Any:
    """`value` as the annotated `kind` (ints are accepted for floats, mappings fill dataclasses), or
    ConfigError naming `key`."""
    return _checked_value(value, kind, key, name, {})


def _convert(value: Any, kind: Any, key: str, name: str) -> Any:
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        for option in (o for o in options if o is not type(None)):
            converted = _convert(value, option, key, name)
            if converted is not _MISMATCH:
                return converted
        return _MISMATCH
    if dataclasses.is_dataclass(kind):
        return fill(kind(), value, key + ".", name) if isinstance(value, dict) else _MISMATCH
    if kind is list or origin is list:
        if not isinstance(value, (list, tuple)):
            return _MISMATCH
        element = (typing.get_args(kind) or (Any,))[0]
        return [_coerce(v, element, f"{key}[{i}]", name) for i, v in enumerate(value)]
    if kind is dict or origin is dict:
        return dict(value) if isinstance(value, dict) else _MISMATCH
    if kind is Any:
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value if kind in (int, str, bool) and type(value) is kind else _MISMATCH


def _describe(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if o is type(None) else _describe(o) for o in typing.get_args(kind))
    if dataclasses.is_dataclass(kind):
        return "a mapping"
    if kind is list or origin is list:
        return "list"
    return getattr(kind, "__name__", str(kind))


def known_keys(cls: type, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, default) for every key a dataclass accepts, sections descended into; a list of
    sections shows as `key[]`. For help texts: the keys listed are exactly the keys accepted."""
    hints = typing.get_type_hints(cls)
    keys: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cls):
        kind, key = hints[f.name], f"{prefix}{_key_name(f.name)}"
        section = _section_type(kind)
        if section is not None:
            many = typing.get_origin(kind) is list
            keys += known_keys(section, f"{key}[]." if many else f"{key}.")
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        keys.append((key, default))
    return keys


def _section_type(kind: Any) -> type | None:
    """The dataclass a field holds (alone, optional, in a list or beside a shorthand), if any."""
    if dataclasses.is_dataclass(kind):
        return kind
    inner = [_section_type(a) for a in typing.get_args(kind) if a is not type(None)]
    return next((t for t in inner if t is not None), None)


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{dotted}': '{part}' is not a section")
    node[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> dict:
    """['train.lr=3e-4', 'data.paths=[a,b]'] -> nested dict; values are parsed as YAML."""
    tree: dict = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like section.key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as error:
            raise ConfigError(f"override '{item}': value is not valid YAML ({' '.join(str(error).split())})") from None
        # YAML reads 3e-4 as a string (it wants 3.0e-4); numbers written either way should work.
        if isinstance(value, str):
            try:
                value = float(value) if any(c in value for c in ".eE") else value
            except ValueError:
                pass
        _set_dotted(tree, key.strip(), value)
    return tree


def resolve_path(path: str | Path, kind: str = "") -> Path:
    """A config path, or the name of a preset shipped with trident (tiny, demo, curate-cc, ...). A path
    object of another filesystem (a UPath: trident.text.storage.location of a URL) is read as given.
    `kind` (training, curation, blend): a name that is no file is looked for among that kind's presets."""
    if not isinstance(path, (str, Path)):
        return path
    if "://" in str(path):  # Path() would collapse it into a local name: say what is not supported instead
        raise ConfigError(f"config file '{path}': a URL; config files are read from a local path or a preset "
                          f"name (copy it here first)")
    candidate = Path(path)
    if candidate.is_file():  # a folder named like a preset (runs/demo's 'demo' in the working folder) is not one
        return candidate
    name = Path(str(path)[:-5] if str(path).endswith(".yaml") else str(path)).name
    presets = preset_names(kind)
    if name in presets:
        return PRESET_DIR / f"{name}.yaml"
    other = preset_names().get(name)
    if other is not None:  # e.g. `trident train curate-cc`
        raise ConfigError(f"config file '{path}' not found: '{name}' is a {other} preset, not a {kind} config "
                          f"({kind} presets: {', '.join(presets)})")
    what = f"{kind} presets" if kind else "presets"
    raise ConfigError(f"config file '{path}' not found{did_you_mean(name, presets)} ({what}: {', '.join(presets)})")


def preset_names(kind: str = "") -> dict[str, str]:
    """The presets shipped in src/trident/configs ({name: kind}, sorted), all or those of `kind`: a
    curation pipeline holds `stages`, a blend `sources`, a training config anything else."""
    return {name: of for name, of in _preset_kinds() if not kind or of == kind}


@lru_cache(maxsize=1)
def _preset_kinds() -> tuple[tuple[str, str], ...]:
    """(name, kind) of every preset, read once a process: the presets ship with trident, and reading all
    of them on every load_config of a preset cost ~0.2 s a call."""
    found = []
    for file in sorted(PRESET_DIR.glob("*.yaml")):
        tree = yaml.safe_load(file.read_text()) or {}
        found.append((file.stem, "curation" if "stages" in tree else "blend" if "sources" in tree else "training"))
    return tuple(found)


def read_yaml(path: Path, allow_list: bool = False) -> dict | list:
    """The YAML document in `path` (empty: {}): a mapping, or a list where `allow_list`."""
    try:
        tree = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"config file '{path}' is not valid YAML: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"config file '{path}' cannot be read ({error})") from None
    tree = {} if tree is None else tree
    if not isinstance(tree, dict) and not (allow_list and isinstance(tree, list)):
        raise ConfigError(f"config file '{path}' must hold a mapping{' or a list' if allow_list else ' of sections'}")
    return tree
