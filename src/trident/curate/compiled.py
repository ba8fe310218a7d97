"""Curation's compiled loops (numba functions) as ahead-of-time extension modules, so a process loads
them in a millisecond instead of starting numba.

Through numba's JIT, even with its on-disk cache, a process pays about 1.2 s of CPU before the first
loop runs (measured: ``import numba`` 0.35-0.6 s; loading the first cached function 0.7-0.9 s, as
numba sets up its whole compiler and imports scipy.linalg). So the first process that needs a set of
loops (`CompiledLoops`: fuzzy dedup's, fastText's) builds them once with numba's AOT compiler
(numba.pycc, in a child process) into $TRIDENT_CACHE/kernels (default ~/.cache/trident/kernels), a
file per loop source, numba version and platform. The build needs a C compiler; where it fails, the
reason is kept beside it (`<name>.failed`, not retried until the source or numba changes) and the
loops run through numba's JIT: the same code, the same results. TRIDENT_KERNELS=jit skips the
extensions (TRIDENT_KERNELS=aot makes a failed build an error).

    python -m trident.curate.compiled --build PATH SOURCE_MODULE EXPORTS_JSON   (what a build runs)
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import platform
import sys
from pathlib import Path
from types import ModuleType

from trident.text.storage import cache_root

log = logging.getLogger(__name__)
MODE_ENV = "TRIDENT_KERNELS"
MODES = ("auto", "aot", "jit")
_BUILD_SECONDS = 900
# x86-64 micro-architecture levels by the /proc/cpuinfo flags they need (the JIT uses the host's own
# features; a named level keeps a cached module valid on any machine that has them, VMs included).
_X86_LEVELS = (
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave",
                   "cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
)


class KernelBuildError(RuntimeError):
    """The ahead-of-time build failed and TRIDENT_KERNELS=aot asked for it."""


def kernel_mode() -> str:
    mode = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def _numba_fingerprint() -> bytes:
    """numba's version file (read, not imported: importing numba is what this module avoids)."""
    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        return b"no numba"
    version = Path(spec.origin).with_name("_version.py")
    return version.read_bytes() if version.exists() else spec.origin.encode()


@functools.cache
def target_cpu() -> str:
    """The CPU the extension is compiled for: the highest x86-64 level this machine's flags allow
    (Linux), else LLVM's generic CPU of the architecture ("")."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return ""
    return next((level for level, needs in _X86_LEVELS if needs <= set(flags)), "")


def build(path: Path, source: str, exports: dict[str, str]) -> None:
    """Compile every `exports` function of module `source` into the extension ``path`` (this
    process imports numba). Written under a temporary name and renamed: no reader sees half a file."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending-deprecation notice: the JIT stays the fallback
        from numba.pycc import CC

        loops = importlib.import_module(source)
    cc = CC(path.name.split(".")[0], source_module=loops)
    cc.output_dir = str(path.parent)
    cc.output_file = f".{path.name}.{os.getpid()}.tmp"
    cc.target_cpu = target_cpu()
    for function, signature in exports.items():
        cc.export(function, signature)(getattr(loops, function).py_func)
    path.parent.mkdir(parents=True, exist_ok=True)
    cc.compile()
    os.replace(path.parent / cc.output_file, path)


def _locked(folder: Path):
    """An exclusive lock on folder/.lock (fcntl where it exists), so one process builds at a time."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / ".lock", "a+")
    try:
        import fcntl
    except ImportError:  # no fcntl: builds may overlap; each renames a whole file into place
        return handle
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


class CompiledLoops:
    """The numba functions `exports` ({name: pycc signature}, arrays C-contiguous as their callers
    pass them) of module `source`, from an extension built ahead of time or through the JIT.
    `also`: other modules of numba code that `source` calls (their text is in the module's name)."""

    def __init__(self, prefix: str, source: str, exports: dict[str, str], also: tuple[str, ...] = ()) -> None:
        self.prefix, self.source, self.exports, self.also = prefix, source, exports, also

    def module_name(self) -> str:
        """The extension's module name: a hash of what its machine code depends on."""
        digest = hashlib.sha256()
        sources = [Path(importlib.util.find_spec(name).origin).read_bytes() for name in (self.source, *self.also)]
        for part in (*sources, repr(sorted(self.exports.items())).encode(),
                     _numba_fingerprint(), sys.version.encode(), platform.machine().encode(),
                     platform.system().encode(), target_cpu().encode()):
            digest.update(hashlib.sha256(part).digest())
        return f"{self.prefix}_{digest.hexdigest()[:20]}"

    def extension_path(self, name: str | None = None) -> Path:
        name = name or self.module_name()
        return cache_root() / "kernels" / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"

    def load(self, path: Path) -> ModuleType:
        loader = importlib.machinery.ExtensionFileLoader(path.name.split(".")[0], str(path))
        spec = importlib.util.spec_from_file_location(loader.name, str(path), loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        missing = [name for name in self.exports if not hasattr(module, name)]
        if missing:
            raise ImportError(f"{path}: lacks {missing}")
        return module

    def build_in_child(self, path: Path) -> str | None:
        """Build ``path`` in a child process (its compiler output stays out of this one's); None
        when it worked, else the reason."""
        import subprocess  # here: only a build needs it, and every run imports this module

        cmd = [sys.executable, "-m", "trident.curate.compiled", "--build", str(path), self.source,
               json.dumps(self.exports)]
        package_root = str(Path(__file__).resolve().parents[2])  # this trident, however it was found
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_BUILD_SECONDS, env=env)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{type(err).__name__}: {err}"
        if done.returncode != 0 or not path.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-6:]
            return f"exit {done.returncode}: " + " | ".join(tail)
        return None

    def aot_module(self, mode: str = "auto") -> ModuleType | None:
        """The extension module, built first if need be; None where it cannot be had (reason
        logged): a failed build, an unwritable cache folder, a module that does not load."""
        try:
            return self._built_module(mode)
        except (OSError, ImportError) as err:
            if mode == "aot":
                raise KernelBuildError(f"the ahead-of-time {self.prefix} loops are unavailable: {err}") from err
            log.warning("%s loops: no ahead-of-time module (%s); using numba's JIT", self.prefix, err)
            return None

    def _built_module(self, mode: str) -> ModuleType | None:
        path = self.extension_path()
        failed = path.with_name(path.name.split(".")[0] + ".failed")
        if path.exists():
            return self.load(path)
        if failed.exists() and mode != "aot":
            return None
        with _locked(path.parent):  # released when the handle closes
            if not path.exists():
                reason = self.build_in_child(path)
                if reason is not None:
                    failed.write_text(reason + "\n")
                    if mode == "aot":
                        raise KernelBuildError(f"building {path.name} failed: {reason}")
                    log.warning("%s loops: ahead-of-time build failed (%s); using numba's JIT (reason kept "
                                "in %s)", self.prefix, reason[:300], failed)
                    return None
        return self.load(path)

    @functools.cache
    def kernels(self) -> ModuleType:
        """The compiled loops, by the names of `exports`: the extension module, or the source
        module itself (numba's JIT, with its on-disk cache)."""
        mode = kernel_mode()
        module = None if mode == "jit" else self.aot_module(mode)
        return module if module is not None else importlib.import_module(self.source)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["--build"] or len(argv) != 4:
        print("usage: python -m trident.curate.compiled --build PATH SOURCE_MODULE EXPORTS_JSON", file=sys.stderr)
        return 2
    build(Path(argv[1]), argv[2], json.loads(argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
