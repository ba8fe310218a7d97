"""A small English corpus that every Python installation ships: the standard library's docstrings.

First the language-reference topics that `help()` shows (pydoc_data.topics), then one document
per public module (its docstring and its functions') and one per public class (its
docstring and its methods'), rendered as plain text with signatures. No download, no third-party
text. The order is fixed (sorted module, then member names) and memory addresses are scrubbed
from signatures, so the same Python version builds the same corpus.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import os
import pkgutil
import re
import sys
import warnings
from pathlib import Path
from typing import Iterator

# importing these has side effects (opens a browser, prints, starts Tk, runs tests) or needs a GUI
SKIP_MODULES = {
    "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3",
    "pydoc_data", "ensurepip", "venv", "xxlimited", "xxlimited_35", "xxsubtype", "msvcrt", "winreg",
    "winsound", "nt", "_winapi", "encodings",
}
MAX_SUBMODULE_DEPTH = 2  # e.g. email.mime.text; deeper packages add little prose
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_BOUND = re.compile(r"\$\w+(, )?")


def stdlib_module_names() -> list[str]:
    """Public standard-library module names (packages' submodules included), sorted."""
    names = []
    for top in sorted(getattr(sys, "stdlib_module_names", ())):
        if top.startswith("_") or top in SKIP_MODULES:
            continue
        names.append(top)
        spec = _find_spec(top)
        if spec is not None and spec.submodule_search_locations:
            names += _submodules(top, list(spec.submodule_search_locations), MAX_SUBMODULE_DEPTH)
    return sorted(names)


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _submodules(package: str, paths: list[str], depth: int) -> list[str]:
    """Submodule names found on disk; unlike pkgutil.walk_packages this imports nothing."""
    found = []
    for info in pkgutil.iter_modules(paths):
        if info.name.startswith("_") or info.name in SKIP_MODULES or depth < 1:
            continue
        name = f"{package}.{info.name}"
        found.append(name)
        if info.ispkg:
            found += _submodules(name, [os.path.join(p, info.name) for p in paths], depth - 1)
    return found


def _signature(obj) -> str:
    text = getattr(obj, "__text_signature__", None)
    if isinstance(text, str):
        # C functions carry their signature as text, e.g. "($self, key, /)"; parsing it is slow
        return _BOUND.sub("", text)
    try:
        signature = inspect.signature(obj)
    except Exception:  # some signatures fail to evaluate in many ways
        return "(...)"
    shown = [p.replace(default=_Default(p.default)) if p.default is not p.empty else p
             for p in signature.parameters.values()]
    return _ADDRESS.sub("", str(signature.replace(parameters=shown)))


class _Default:
    """A default value as a signature shows it: literals as they are; anything else (os.environ,
    objects built at import) as `...`, so the corpus never depends on this process's state."""

    LITERALS = (type(None), bool, int, float, str, bytes)

    def __init__(self, value):
        self.text = repr(value) if type(value) in self.LITERALS else "..."

    def __repr__(self) -> str:
        return self.text


def _block(header: str, doc: str | None) -> str:
    doc = inspect.cleandoc(doc) if doc else ""
    return f"{header}\n{doc}".strip() if doc else ""


def _public_members(obj, module_name: str, seen: set):
    """Public members defined here, or in a private C module and first re-exported here."""
    for name, member in sorted(vars(obj).items()):
        if name.startswith("_"):
            continue
        home = getattr(member, "__module__", None)
        if home is not None and home != module_name and not home.startswith("_"):
            continue  # re-exported from another public module: documented at home
        if inspect.isclass(member) or inspect.isroutine(member):
            if id(member) in seen:
                continue
            seen.add(id(member))
        yield name, member


def _class_document(module_name: str, name: str, cls) -> str:
    parts = [_block(f"class {module_name}.{name}{_signature(cls)}", cls.__doc__)]
    for member_name, member in sorted(vars(cls).items()):
        if member_name.startswith("_"):
            continue
        func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if inspect.isroutine(func):
            parts.append(_block(f"{name}.{member_name}{_signature(func)}", getattr(func, "__doc__", None)))
        elif isinstance(member, property) or inspect.isgetsetdescriptor(member):
            parts.append(_block(f"{name}.{member_name} (attribute)", getattr(member, "__doc__", None)))
    return "\n\n".join(p for p in parts if p)


def _module_documents(module, seen: set) -> Iterator[str]:
    name = module.__name__
    parts = [_block(f"Module {name}", module.__doc__)]
    classes = []
    for member_name, member in _public_members(module, name, seen):
        if inspect.isclass(member):
            classes.append((member_name, member))
        elif inspect.isfunction(member) or inspect.isbuiltin(member):
            parts.append(_block(f"{name}.{member_name}{_signature(member)}", member.__doc__))
    module_text = "\n\n".join(p for p in parts if p)
    if module_text:
        yield module_text
    for class_name, cls in classes:
        text = _class_document(name, class_name, cls)
        if text:
            yield text


def _quiet():
    # some modules print or warn (deprecations) on import or attribute access; keep output clean
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def _import_quietly(name: str):
    with _quiet():
        return importlib.import_module(name)


def iter_stdlib_documents(stats: dict | None = None) -> Iterator[dict]:
    """{"text", "source"} documents in a fixed order; `stats` receives modules used/failed."""
    stats = stats if stats is not None else {}
    stats.setdefault("modules", 0)
    stats.setdefault("failed_imports", [])
    yield from _language_reference_documents(stats)
    # import everything first: importing a submodule can rebind a package attribute (curses.has_key),
    # so rendering must see the same, complete import state on every run
    modules = []
    for name in stdlib_module_names():
        try:
            modules.append(_import_quietly(name))
        except BaseException as err:  # SystemExit, ImportError, OSError...: counted, not fatal
            if isinstance(err, KeyboardInterrupt):
                raise
            stats["failed_imports"].append(name)
    stats["modules"] += len(modules)
    seen: set = set()
    for module in modules:
        with _quiet():
            texts = list(_module_documents(module, seen))
        for text in texts:
            yield {"text": text, "source": module.__name__}


def _language_reference_documents(stats: dict) -> Iterator[dict]:
    """The language-reference topics `help()` shows (pydoc_data.topics), one document each."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions strip it; the docstrings still make a corpus
        stats["failed_imports"].append("pydoc_data.topics")
        return
    for topic in sorted(topics):
        text = topics[topic].strip()
        if text:
            yield {"text": text, "source": f"pydoc_data.topics:{topic}"}


def write_corpus(out_path, max_docs: int | None = None) -> int:
    """Write the corpus from this process's import state (see build_stdlib_corpus)."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    stats: dict = {}
    count = chars = 0
    tmp = out_path.with_name(out_path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for doc in iter_stdlib_documents(stats):
                if max_docs is not None and count >= max_docs:
                    break
                f.write(json.dumps(doc, ensure_ascii=False) + "\n")
                count += 1
                chars += len(doc["text"])
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(out_path)
    stats.update(documents=count, characters=chars, python=sys.version.split()[0],
                 failed_import_count=len(stats.get("failed_imports", [])))
    stats_path(out_path).write_text(json.dumps(stats, indent=1) + "\n")
    return count


def stats_path(out_path) -> Path:
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + ".stats.json")


def build_stdlib_corpus(out_path, max_docs: int | None = None) -> int:
    """Write the corpus as JSONL to `out_path`; returns the number of documents written.

    Runs in a fresh `python -I -S` process that imports nothing but the standard library, because
    libraries loaded by the caller (torch, ...) patch stdlib functions and would change the text.
    OUT.stats.json records the modules used, those that failed to import, documents, characters.
    """
    import subprocess

    out_path = Path(out_path).absolute()
    command = [sys.executable, "-I", "-S", __file__, str(out_path)]
    if max_docs is not None:
        command.append(str(int(max_docs)))
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the standard-library corpus failed:\n{done.stderr[-2000:]}")
    return int(json.loads(stats_path(out_path).read_text())["documents"])


if __name__ == "__main__":  # the isolated process started by build_stdlib_corpus
    write_corpus(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
