"""What the hardware can do: the accelerator profiles of hardware.yaml (peaks, memory, bandwidths,
latencies) and the peak of the device a process trains on (a known GPU's datasheet figure, or a
matmul timed on this CPU). The planner and the trainer both read them from here.

torch is imported only where a peak is measured or a CUDA device is asked, so loading a GPU profile
(`trident plan`) never pays for it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

import yaml

PROFILE_FILE = Path(__file__).parent / "hardware.yaml"

# Dense bf16 peak TFLOP/s by CUDA device name (vendor datasheets, no sparsity): the MFU denominator
# of a training run, also for cards that have no full profile in hardware.yaml.
KNOWN_PEAKS = {"A100": 312.0, "H100": 989.0, "H200": 989.0, "H800": 989.0, "A10": 125.0, "L4": 121.0,
               "V100": 125.0, "4090": 165.0, "B200": 2250.0, "GB200": 2500.0}


@dataclass
class Hardware:
    """One accelerator in its node, as hardware.yaml describes it (see the comments there)."""
    name: str
    peak_tflops: float
    fp32_peak_tflops: float
    sustained_efficiency: float
    memory_gib: float
    reserved_gib: float
    hbm_gbs: float
    intra_node_busbw_gbs: float
    intra_node_latency_us: float
    inter_node_busbw_gbs: float
    inter_node_latency_us: float
    tp_overlap: float = 0.0
    pp_overlap: float = 0.0
    dp_overlap: float = 0.0
    gpus_per_node: int = 8
    shared_host: bool = False
    description: str = ""

    def peak(self, precision: str) -> float:
        """Peak FLOP/s of one device for the training precision."""
        return (self.fp32_peak_tflops if precision == "fp32" else self.peak_tflops) * 1e12

    @property
    def usable_bytes(self) -> float:
        return (self.memory_gib - self.reserved_gib) * 2**30


def read_profiles(path: str | Path | None = None) -> dict[str, dict]:
    """Raw profiles from the bundled hardware.yaml, updated by a user file (same layout)."""
    profiles = yaml.safe_load(PROFILE_FILE.read_text())
    if path is not None:
        try:
            extra = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ValueError(f"hardware file '{path}': {error}") from None
        if not isinstance(extra, dict) or not all(isinstance(v, dict) for v in extra.values()):
            raise ValueError(f"hardware file '{path}': expected a mapping of profile name -> fields")
        for name, values in extra.items():
            profiles[name] = {**profiles.get(name, {}), **values}
    return profiles


def load_hardware(name: str, path: str | Path | None = None) -> Hardware:
    """The profile `name`, with cpu `measure`/`detect` entries resolved. Unknown names and fields are errors."""
    profiles = read_profiles(path)
    if name not in profiles:
        raise ValueError(f"unknown hardware '{name}'; known: {', '.join(sorted(profiles))}"
                         + ("" if path else " (add more with --hardware FILE)"))
    raw = dict(profiles[name])
    known = {f.name for f in fields(Hardware)} - {"name"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"hardware profile '{name}': unknown field(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(known))}")
    raw["peak_tflops"] = _resolve(raw.get("peak_tflops"), "bf16")
    raw["fp32_peak_tflops"] = _resolve(raw.get("fp32_peak_tflops"), "fp32")
    raw["memory_gib"] = _resolve(raw.get("memory_gib"), "")
    try:
        return Hardware(name=name, **raw)
    except TypeError as error:
        raise ValueError(f"hardware profile '{name}': {error}") from None


def _resolve(value, dtype: str):
    """Resolve `measure` / `detect` entries of the cpu profile on this host."""
    if value == "measure":
        import torch
        return measured_cpu_peak_tflops(torch.float32 if dtype == "fp32" else torch.bfloat16)
    if value == "detect":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return value


@lru_cache(maxsize=None)
def measured_cpu_peak_tflops(dtype, trials: int = 7) -> float:
    """Matmul TFLOP/s this CPU sustains in `dtype` (a torch.dtype) with the current thread count.

    The best of several short trials, so a moment of other load on the machine does not shrink the
    peak (which would inflate MFU). Low-precision matmuls can be very slow on CPUs without native
    support, so they are measured on smaller matrices."""
    import torch

    size = 1024 if dtype == torch.float32 else 256
    generator = torch.Generator().manual_seed(0)  # never draw from the training RNG streams
    a = torch.randn(size, size, generator=generator).to(dtype)
    b = torch.randn(size, size, generator=generator).to(dtype)
    torch.mm(a, b)
    best = 0.0
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(3):
            torch.mm(a, b)
        best = max(best, 3 * 2.0 * size**3 / (time.perf_counter() - start))
    return best / 1e12


def describe_peak(device, dtype, configured: float = 0.0) -> str:
    """Which peak MFU divides by, and where it comes from (for the run's first console line)."""
    value = peak_tflops(device, dtype, configured)
    if configured > 0:
        return f"{value:.3g} TFLOP/s from train.peak_tflops"
    if device.type == "cuda":
        return f"{value:.3g} TFLOP/s, the known peak of this GPU" if value else "no known peak for this GPU (MFU 0)"
    return (f"{value:.3g} TFLOP/s, this CPU's matmul peak measured once at start (best of 7 trials; "
            f"set train.peak_tflops to fix it)")


def peak_tflops(device, dtype, configured: float = 0.0) -> float:
    """Per-device peak of a torch.device in a torch.dtype: the configured value, else a known GPU's
    bf16 peak (1/16 of it in fp32), else measured on CPU; 0.0 for an unknown GPU."""
    if configured > 0:
        return configured
    import torch

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in KNOWN_PEAKS.items():
            if key in name:
                return value if dtype != torch.float32 else value / 16.0  # fp32 without TF32: ~1/16
        return 0.0
    return measured_cpu_peak_tflops(dtype)


def clean_process_context(preload: tuple[str, ...] = ()):
    """A multiprocessing context whose workers start clean, as spawned ones do (no inherited threads,
    locks or state), but cheaply: on Linux a fork server that imported the `preload` modules once forks
    each worker, which then skips the seconds `import torch` costs a fresh interpreter; elsewhere spawn.
    The server is started once per process, with the modules of the first call."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    return context
