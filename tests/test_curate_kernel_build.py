"""The ahead-of-time build of curation's compiled loops (trident.curate.compiled; fuzzy dedup's in
trident.curate.dedup.kernels.build): the extension computes what numba's JIT computes, a failed
build falls back to the JIT, and a fuzzy-dedup run imports neither numba nor the other stages' libraries."""
import json
import subprocess
import sys

import numpy as np
import pytest

from dedup_fixtures import odd_texts
from trident.curate import compiled
from trident.curate.dedup.kernels import build as kernel_build, numba_loops as shingle_jit
from trident.curate.dedup.kernels.loops import _ASCII_SPACE, _WIDE_SPACES, _XXH3_SECRET, _lower_table
from trident.curate.dedup.minhash import MinHasher
from trident.curate.run.registry import BUILTIN_STAGES, registered_stages


def _compare(aot, jit, name, *args):
    got, want = getattr(aot, name)(*args), getattr(jit, name)(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert np.array_equal(a, b), name


def test_the_extension_computes_what_the_jit_computes():
    try:
        aot = kernel_build.LOOPS.aot_module("aot")  # built once per machine into $TRIDENT_CACHE/kernels
    except compiled.KernelBuildError as err:
        pytest.skip(f"no ahead-of-time build here (the JIT serves): {err}")
    assert aot.__file__ == str(kernel_build.LOOPS.extension_path())
    texts = odd_texts(4) + ["word " * 400, "x"]
    data = [t.encode("utf-8", "surrogatepass") for t in texts]
    raw = np.frombuffer(b"".join(data), dtype=np.uint8).copy()
    bounds = np.r_[0, np.cumsum([len(d) for d in data])].astype(np.int64)
    for table in (_lower_table(), np.zeros(0, dtype=np.int32)):
        _compare(aot, shingle_jit, "normalise_kernel", raw, bounds, _ASCII_SPACE, _WIDE_SPACES, table)
    buf, norm, _ = shingle_jit.normalise_kernel(raw, bounds, _ASCII_SPACE, _WIDE_SPACES, _lower_table())
    buf = np.ascontiguousarray(buf)
    for ngram, word, packed in [(5, False, False), (1, False, False), (3, True, False), (5, False, True), (3, True, True)]:
        _compare(aot, shingle_jit, "shingle_kernel", buf, norm, ngram, word, packed)
    flat, offsets = shingle_jit.shingle_kernel(buf, norm, 5, False, False)
    flat, offsets = np.ascontiguousarray(flat), np.ascontiguousarray(offsets)
    hasher = MinHasher(bands=20)
    _compare(aot, shingle_jit, "signature_kernel", flat, offsets, hasher.multipliers)
    for ngram, word in [(5, False), (3, True)]:
        _compare(aot, shingle_jit, "shingle_signature_kernel", buf, norm, ngram, word, hasher.multipliers)
    pairs = np.random.default_rng(0).integers(0, len(texts), (2, 300))
    for at_least in (0.0, 0.7):
        _compare(aot, shingle_jit, "pair_jaccard", flat, offsets, pairs[0], pairs[1], at_least)
    sig = shingle_jit.signature_kernel(flat, offsets, hasher.multipliers)
    _compare(aot, shingle_jit, "band_key_kernel", sig, 20, _XXH3_SECRET)
    _compare(aot, shingle_jit, "xxh64_of", raw)


def test_a_failed_build_leaves_the_jit_and_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIDENT_CACHE", str(tmp_path))
    loops = kernel_build.LOOPS
    monkeypatch.setattr(loops, "build_in_child", lambda path: "exit 1: cc: not found")
    assert loops.aot_module("auto") is None
    failed = loops.extension_path().with_name(loops.module_name() + ".failed")
    assert failed.read_text() == "exit 1: cc: not found\n"
    assert loops.aot_module("auto") is None  # not retried: the reason is kept
    with pytest.raises(compiled.KernelBuildError, match="cc: not found"):
        loops.aot_module("aot")


def test_an_unwritable_cache_or_a_broken_module_leaves_the_jit(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TRIDENT_CACHE", str(blocker))  # kernels/ cannot be made under a file
    loops = kernel_build.LOOPS
    assert loops.aot_module("auto") is None
    with pytest.raises(compiled.KernelBuildError, match="unavailable"):
        loops.aot_module("aot")
    monkeypatch.setenv("TRIDENT_CACHE", str(tmp_path / "cache"))
    broken = loops.extension_path()
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a shared library")
    assert loops.aot_module("auto") is None


def test_the_mode_is_checked(monkeypatch):
    monkeypatch.setenv("TRIDENT_KERNELS", "fast")
    with pytest.raises(ValueError, match="TRIDENT_KERNELS='fast'"):
        compiled.kernel_mode()


def test_the_module_name_follows_the_kernel_source(monkeypatch):
    name = kernel_build.LOOPS.module_name()
    monkeypatch.setitem(kernel_build.EXPORTS, "xxh64_of", "u8(u1[:])")
    assert kernel_build.LOOPS.module_name() != name
    assert compiled.target_cpu() in ("", "x86-64-v2", "x86-64-v3")
    from trident.curate.extract.fasttext_model import PREDICT_LOOPS

    assert PREDICT_LOOPS.module_name().startswith("fasttext_") and name.startswith("shingle_")


def test_builtin_stage_modules_are_where_the_stages_register():
    stages = registered_stages()
    builtin = {name: cls.__module__ for name, cls in stages.items() if cls.__module__.startswith("trident.curate.")}
    assert builtin == BUILTIN_STAGES


def test_a_fuzzy_dedup_pipeline_imports_only_what_it_runs():
    code = ("import sys\n"
            "from trident.curate.run.pipeline import load_pipeline_config\n"
            "load_pipeline_config([{'stage': 'fuzzy_dedup', 'bands': 20}])\n"
            "heavy = [m for m in ('numba', 'ftfy', 'warcio', 'trafilatura', 'resiliparse', 'torch', 'matplotlib',"
            " 'scipy', 'ray', 'transformers') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_one_worker_fuzzy_dedup_run_imports_no_pool_nor_rich(tmp_path):
    """The whole command, near-copies found and dropped: one worker starts no process pool, and the
    summary, the charts and np.unique's masked-array check import nothing a run does not need."""
    words = [f"w{i}" for i in range(200)]
    lines = [json.dumps({"id": f"d{k}", "text": " ".join(words[k % 7 * 20 :][:60]) + (" end" * (k % 2))})
             for k in range(40)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "fuzzy.yaml").write_text("progress: false\nstages:\n  - {stage: fuzzy_dedup, bands: 20}\n")
    code = ("import sys\n"
            "from trident.cli import main\n"
            f"assert main(['curate', {str(tmp_path / 'fuzzy.yaml')!r}, '--input', {str(tmp_path / 'in.jsonl')!r},"
            f" '--out', {str(tmp_path / 'out')!r}]) == 0\n"
            "unneeded = [m for m in ('multiprocessing', 'concurrent.futures.process', 'subprocess', 'numpy.ma', 'rich',"
            " 'PIL.JpegImagePlugin', 'numba') if m in sys.modules]\n"
            "assert not unneeded, unneeded\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, capture_output=True)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["stages"][-1]["counters"]["dropped:duplicate"] > 0
