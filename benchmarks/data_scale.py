"""Training indices of MT-NLG's blend at the paper's scale: blend, doc/sample/shuffle indices, cache.

Fifteen synthetic datasets with the paper's token counts (docs/reference.md) and realistic document
counts (the Pile's, ~1k tokens a document for the two curated Common Crawl snapshots): 314M documents,
339B tokens. Each PREFIX.idx is real (6.3 GB in all); each PREFIX.bin is a sparse file of the right
size, so the tokens take no disk. The run is the 530B recipe's: seq 2048, batch ramp-up 32 -> 1920 over
12B tokens, ~270B tokens (132M samples), valid_fraction 0.02.

Each role runs in its own process (peak RSS is per process: VmHWM, which counts mapped file pages
that were read as well as the process's own memory):
  build  rank 0: trident.data.build.build_datasets with an empty cache (builds and saves everything)
  read   another rank: the same call once the cache exists (the trainer's path for ranks != 0)
Then the blend alone: the compiled greedy loop against the old plain-Python loop on 1M samples in one
process (ratio), and the compiled loop on the run's 132M samples (absolute; Megatron-LM's C++ helper
takes 3.5 s for this on a 2-core machine, issue 18).

    python benchmarks/data_scale.py [--root DIR] [--scale 1.0] [--keep]   # ~5 minutes idle, ~13 GB of disk
    python benchmarks/data_scale.py --blend-only                          # the blend figures alone, ~30 s
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# name, tokens (B), weight, documents (M): tokens and weights from the paper, documents from the Pile
SOURCES = [
    ("books3", 25.7, 0.143, 0.197), ("openwebtext2", 14.8, 0.193, 17.1), ("stackexchange", 11.6, 0.057, 15.6),
    ("pubmed_abstracts", 4.4, 0.029, 15.5), ("wikipedia", 4.2, 0.048, 6.03), ("gutenberg_pg19", 2.7, 0.009, 0.0286),
    ("bookcorpus2", 1.5, 0.010, 0.0179), ("nih_exporter", 0.3, 0.002, 0.940), ("pile_cc", 49.8, 0.094, 55.0),
    ("arxiv", 20.8, 0.014, 1.26), ("github", 24.3, 0.016, 19.0), ("cc_2020_50", 68.7, 0.130, 68.7),
    ("cc_2021_04", 82.6, 0.157, 82.6), ("realnews", 21.9, 0.090, 31.0), ("cc_stories", 5.3, 0.009, 1.0),
]
SEQ_LENGTH, GLOBAL_BATCH, RAMPUP, TRAIN_TOKENS = 2048, 1920, [32, 32, 12_000_000_000], 270e9
GIB = 2**30


def write_sparse_source(prefix: Path, tokens: int, documents: int, seed: int) -> None:
    """PREFIX.idx with `documents` log-normal sizes summing to ~`tokens`, and a sparse PREFIX.bin."""
    from trident.data.indexed import INDEX_HEADER, INDEX_VERSION, dtype_code

    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(0.0, 1.0, documents)
    sizes = np.maximum(1, np.round(sizes * (tokens / sizes.sum()))).astype(np.int32)
    itemsize = np.dtype(np.uint16).itemsize
    header = (INDEX_HEADER + struct.pack("<Q", INDEX_VERSION) + struct.pack("<B", dtype_code(np.uint16))
              + struct.pack("<QQ", documents, documents + 1))
    with open(f"{prefix}.idx", "wb") as f:
        f.write(header)
        f.write(sizes.astype("<i4").tobytes())
        offset, chunk = 0, 1 << 23
        for start in range(0, documents, chunk):  # pointers in chunks: bounded memory
            part = sizes[start : start + chunk].astype(np.int64) * itemsize
            pointers = np.cumsum(part) - part + offset
            offset += int(part.sum())
            f.write(pointers.astype("<i8").tobytes())
        for start in range(0, documents + 1, chunk):
            f.write(np.arange(start, min(start + chunk, documents + 1), dtype="<i8").tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        f.truncate(offset)  # sparse: no blocks written


def make_sources(root: Path, scale: float) -> list:
    """Write the 15 datasets (once; reused when present) and return data.paths."""
    paths = []
    for k, (name, tokens_b, weight, documents_m) in enumerate(SOURCES):
        prefix = root / name
        if not Path(f"{prefix}.bin").exists():
            write_sparse_source(prefix, int(tokens_b * 1e9 * scale), max(2, int(documents_m * 1e6 * scale)), k)
        paths += [weight, str(prefix)]
    return paths


def run_samples(scale: float) -> tuple[int, int]:
    """(train, valid) samples of the 530B recipe: steps until ~270B tokens, ramp-up as configured."""
    from trident.train.lr_schedule import batch_size

    tokens, samples = 0, 0
    while tokens < TRAIN_TOKENS * scale:
        size = batch_size(tokens, GLOBAL_BATCH, RAMPUP, SEQ_LENGTH)
        samples += size
        tokens += size * SEQ_LENGTH
    return samples, 4 * GLOBAL_BATCH  # valid: eval_iters 4 x the global batch, as the trainer asks


def role(root: Path, scale: float, role_name: str, workers: int) -> dict:
    """build_datasets as one rank does, in this process: seconds, peak RSS, what came from the cache."""
    from trident.config import DataConfig
    from trident.data.build import build_datasets

    from trident.data.prebuild import index_workers

    config = DataConfig(paths=make_sources(root, scale), valid_fraction=0.02, cache_dir=str(root / "cache"),
                        index_workers=workers)
    train_samples, valid_samples = run_samples(scale)
    start, cpu, before = time.perf_counter(), time.process_time(), os.times()
    train, valid = build_datasets(config, SEQ_LENGTH, train_samples, valid_samples, seed=1234)
    seconds, cpu, after = time.perf_counter() - start, time.process_time() - cpu, os.times()
    # the index workers (rank 0 only): their CPU, and the largest one's peak RSS (ru_maxrss of the
    # reaped children; it may count the parent's size at fork, so it errs high)
    children_cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    children_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / GIB
    first, last = train[0], train[len(train) - 1]  # samples read through the (mapped) indices
    assert first.shape == last.shape == (SEQ_LENGTH + 1,) and len(valid) == valid_samples
    arrays = [train.dataset_index, train.dataset_sample_index]
    arrays += [getattr(d, a) for d in train.datasets for a in ("documents", "doc_idx", "sample_idx", "shuffle_idx")]
    used = index_workers(config, sum(len(d.indexed) for d in train.datasets), len(train.datasets))
    return {"seconds": round(seconds, 2), "cpu_s": round(cpu + children_cpu, 2),
            "peak_gib": round(_peak_rss_kib() * 1024 / GIB, 3), "workers": used if role_name == "build" else 1,
            "worker_peak_gib": round(children_peak, 3) if used > 1 and role_name == "build" else 0.0,
            "train_samples": train_samples, "valid_samples": valid_samples, "from_cache": train.from_cache,
            "memory_mapped": all(_is_mapped(a) for a in arrays)}


def _peak_rss_kib() -> int:
    """This process's peak resident memory (VmHWM; unlike ru_maxrss it does not inherit the
    parent's size across fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise KeyError("VmHWM")


def _is_mapped(array) -> bool:
    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = getattr(array, "base", None)
    return False


def old_python_blend(weights, num_samples: int) -> np.ndarray:
    """trident's blend before issue 18: the greedy rule in plain Python (the baseline)."""
    from trident.data.blend import normalize_weights

    w = [float(x) for x in normalize_weights(weights)]
    counts, which = [0] * len(w), np.empty(num_samples, dtype=np.int16)
    for n in range(num_samples):
        scale = max(n, 1)
        best, best_error = 0, w[0] * scale - counts[0]
        for d in range(len(w)):
            error = w[d] * scale - counts[d]
            if error > best_error:
                best, best_error = d, error
        which[n] = best
        counts[best] += 1
    return which


def old_builders(sizes, num_documents: int, seq: int, num_samples: int, seed: int) -> dict:
    """trident's split and index builders before issue 18 (sorting, searchsorted, lexsort, int64)."""
    from trident.data.gpt_dataset import num_epochs_needed
    from trident.data.index_cache import smallest_int

    order = np.random.default_rng(1234).permutation(num_documents)
    n_valid = int(round(0.02 * num_documents))
    documents = np.sort(order[n_valid:])
    del order
    tokens = int(np.asarray(sizes, dtype=np.int64)[documents].sum())
    epochs = num_epochs_needed(tokens, seq, num_samples)
    doc_rng, shuffle_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    doc_idx = smallest_int(doc_rng.permuted(np.tile(documents, (epochs, 1)), axis=1).reshape(-1))
    windows = (epochs * tokens - 1) // seq
    lengths = np.asarray(sizes, dtype=np.int64)[doc_idx]
    ends = np.cumsum(lengths)
    positions = np.arange(windows + 1, dtype=np.int64) * seq
    which = np.searchsorted(ends, positions, side="right")
    sample_idx = smallest_int(np.stack([which, positions - (ends[which] - lengths[which])], axis=1))
    del lengths, ends, positions, which
    epoch = np.arange(windows, dtype=np.int64) * seq // tokens
    shuffle_idx = smallest_int(np.lexsort((shuffle_rng.random(windows), epoch)))
    return {"doc_idx": doc_idx, "sample_idx": sample_idx, "shuffle_idx": shuffle_idx}


def new_builders(sizes, num_documents: int, seq: int, num_samples: int, seed: int) -> dict:
    from trident.data.build import split_documents
    from trident.data.gpt_dataset import build_indices

    documents, _ = split_documents(num_documents, 0.02, 1234)
    return build_indices(sizes, documents, seq, num_samples, seed)


def builder_figures(root: Path, name: str, train_samples: int) -> dict:
    """The split and index builders of one dataset, old and new, in this process (CPU seconds)."""
    from trident.data.indexed import IndexedDataset

    indexed = IndexedDataset(root / name)
    weight = dict((s[0], s[2]) for s in SOURCES)[name] / sum(s[2] for s in SOURCES)
    samples = int(train_samples * weight)
    times = {}
    for label, fn in (("new", new_builders), ("old", old_builders), ("new ", new_builders)):
        start = time.process_time()
        arrays = fn(indexed.sizes, len(indexed), SEQ_LENGTH, samples, 1234)
        times.setdefault(label.strip(), []).append(time.process_time() - start)
        if label == "old":
            reference = arrays
        elif label == "new ":
            assert all(np.array_equal(arrays[a], reference[a]) and arrays[a].dtype == reference[a].dtype
                       for a in arrays), "new builders differ from the old ones"
        del arrays
    return {"dataset": name, "documents": len(indexed), "samples": samples,
            "old_cpu_s": round(min(times["old"]), 2), "new_cpu_s": round(min(times["new"]), 2),
            "speedup": round(min(times["old"]) / min(times["new"]), 2)}


def _timed(fn, *args):
    """(result, wall seconds, CPU seconds) of fn(*args)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def blend_figures(train_samples: int, subset: int) -> dict:
    """The compiled blend against the old loop on `subset` samples (interleaved, best of 2), then
    on the whole run; CPU seconds beside wall seconds (the blend runs on one thread)."""
    from trident.data.blend import build_blending_indices, normalize_weights

    weights = normalize_weights([s[2] for s in SOURCES])
    _, compile_s, _ = _timed(build_blending_indices, weights, 1)  # numba: compile, or load its cache
    compiled, python = [], []
    for _ in range(2):
        (fast, _), _, cpu = _timed(build_blending_indices, weights, subset)
        compiled.append(cpu)
        slow, _, cpu = _timed(old_python_blend, weights, subset)
        python.append(cpu)
        assert np.array_equal(fast, slow), "compiled blend differs from the plain loop"
    full = [_timed(build_blending_indices, weights, train_samples)[1:] for _ in range(2)]
    return {"subset": subset, "python_cpu_s": round(min(python), 2), "compiled_cpu_s": round(min(compiled), 4),
            "speedup": round(min(python) / min(compiled), 1), "compile_or_load_s": round(compile_s, 2),
            "full_samples": train_samples, "full_wall_s": round(min(w for w, _ in full), 2),
            "full_cpu_s": round(min(c for _, c in full), 2)}


def main() -> None:
    from common import emit_json, print_table  # here: it imports torch, which the role processes need not

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="", help="folder for the datasets and cache (default: a temporary one)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of documents, tokens and samples")
    parser.add_argument("--keep", action="store_true", help="keep the datasets (the cache is always removed)")
    parser.add_argument("--role", choices=["build", "read"], help=argparse.SUPPRESS)
    parser.add_argument("--blend-subset", type=int, default=1_000_000)
    parser.add_argument("--compare-dataset", default="wikipedia", help="dataset for the old/new builder ratio")
    parser.add_argument("--blend-only", action="store_true", help="only the blend figures (no datasets)")
    parser.add_argument("--index-workers", type=int, default=0,
                        help="data.index_workers for rank 0's build (0: auto, one per source up to the cores)")
    args = parser.parse_args()
    if args.role:
        print(json.dumps(role(Path(args.root), args.scale, args.role, args.index_workers)))
        return
    if args.blend_only:
        blend = blend_figures(run_samples(args.scale)[0], args.blend_subset)
        print(json.dumps(blend))
        return
    root = Path(args.root or tempfile.mkdtemp(prefix="trident-data-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    make_sources(root, args.scale)
    print(f"datasets in {root}: {time.perf_counter() - start:.0f} s to write", flush=True)
    shutil.rmtree(root / "cache", ignore_errors=True)
    try:
        runs = {}
        for name in ("build", "read"):
            out = subprocess.run([sys.executable, __file__, "--role", name, "--root", str(root),
                                  "--scale", str(args.scale), "--index-workers", str(args.index_workers)],
                                 check=True, capture_output=True, text=True)
            runs[name] = json.loads(out.stdout.strip().splitlines()[-1])
        blend = blend_figures(runs["build"]["train_samples"], args.blend_subset)
        builders = builder_figures(root, args.compare_dataset, runs["build"]["train_samples"])
    finally:
        shutil.rmtree(root / "cache", ignore_errors=True)
        if not args.keep and not args.root:
            shutil.rmtree(root, ignore_errors=True)
    build = runs["build"]
    rows = [[f"rank 0: build ({build['train_samples']:,} train samples, {build['workers']} index workers; "
             f"largest worker peak {build['worker_peak_gib']} GiB)", build["seconds"], build["cpu_s"],
             build["peak_gib"], "< 120 s, < 8 GiB"],
            ["another rank: read the cache (memory-mapped: "
             f"{runs['read']['memory_mapped']})", runs["read"]["seconds"], runs["read"]["cpu_s"],
             runs["read"]["peak_gib"], "< 5 s"]]
    print_table("index building, MT-NLG blend (15 datasets), seq 2048",
                ["role", "wall s", "CPU s (incl. workers)", "peak RSS GiB", "target"], rows)
    print_table("blend (greedy, bit-identical)", ["what", "CPU s", "wall s"], [
        [f"old Python loop, {blend['subset']:,} samples", blend["python_cpu_s"], "-"],
        [f"compiled, {blend['subset']:,} samples (x{blend['speedup']} faster)", blend["compiled_cpu_s"], "-"],
        [f"compiled, {blend['full_samples']:,} samples (Megatron's C++: 3.5 s)", blend["full_cpu_s"],
         blend["full_wall_s"]],
        ["numba compile or cache load, once a process", "-", blend["compile_or_load_s"]]])
    print_table(f"split + doc/sample/shuffle index of {builders['dataset']} ({builders['documents']:,} documents, "
                f"{builders['samples']:,} samples), one process", ["builders", "CPU s"],
                [["before issue 18 (sort, searchsorted, lexsort)", builders["old_cpu_s"]],
                 [f"now (x{builders['speedup']}; identical arrays)", builders["new_cpu_s"]]])
    emit_json("data_scale", {"scale": args.scale, **{f"{k}_{n}": v for n, r in runs.items()
                                                     for k, v in r.items()}, "blend": blend,
                             "builders": builders})


if __name__ == "__main__":
    main()
