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


@dataclass(frozen=True)
class GpuPeak:
    """One product's datasheet peaks per GPU, TFLOP/s: dense 16-bit tensor-core matmul (bf16, fp32
    accumulate; no sparsity) and plain fp32 (torch's default on CUDA: TF32 off for matmuls)."""
    product: str
    bf16: float
    fp32: float
    names: tuple[str, ...]  # torch.cuda.get_device_name() of this product, exactly


# The MFU denominator of a training run, by the exact name the driver reports (never a substring:
# an H100 PCIe is not an H100 SXM, a GB200 not a B200, an A10G not an A10). Figures from the vendor
# datasheets, dense (half the "with sparsity" figure); docs/training.md#mfu names the sources.
GPU_PEAKS = (
    GpuPeak("H100 SXM", 989.5, 67.0, ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB")),
    GpuPeak("H100 PCIe", 756.5, 51.0, ("NVIDIA H100 PCIe",)),
    GpuPeak("H100 NVL", 835.5, 60.0, ("NVIDIA H100 NVL",)),
    GpuPeak("H200 SXM", 989.5, 67.0, ("NVIDIA H200",)),
    GpuPeak("H200 NVL", 835.5, 60.0, ("NVIDIA H200 NVL",)),
    GpuPeak("GH200", 989.5, 67.0, ("NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e")),
    GpuPeak("H800 SXM", 989.5, 67.0, ("NVIDIA H800",)),
    GpuPeak("H800 PCIe", 756.5, 51.0, ("NVIDIA H800 PCIe",)),
    GpuPeak("H20", 148.0, 44.0, ("NVIDIA H20",)),
    GpuPeak("B200", 2250.0, 75.0, ("NVIDIA B200",)),
    GpuPeak("GB200", 2500.0, 80.0, ("NVIDIA GB200",)),
    GpuPeak("A100 SXM 40GB", 312.0, 19.5, ("NVIDIA A100-SXM4-40GB",)),
    GpuPeak("A100 SXM 80GB", 312.0, 19.5, ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM-80GB")),
    GpuPeak("A100 PCIe 40GB", 312.0, 19.5, ("NVIDIA A100-PCIE-40GB",)),
    GpuPeak("A100 PCIe 80GB", 312.0, 19.5, ("NVIDIA A100 80GB PCIe",)),
    GpuPeak("A800 SXM 80GB", 312.0, 19.5, ("NVIDIA A800-SXM4-80GB",)),
    GpuPeak("A800 PCIe 80GB", 312.0, 19.5, ("NVIDIA A800 80GB PCIe",)),
    GpuPeak("A10", 125.0, 31.2, ("NVIDIA A10",)),
    GpuPeak("A10G", 70.0, 31.5, ("NVIDIA A10G",)),  # AWS's part: no NVIDIA datasheet, AWS's figure
    GpuPeak("L4", 121.0, 30.3, ("NVIDIA L4",)),
    GpuPeak("L40S", 362.05, 91.6, ("NVIDIA L40S",)),
    GpuPeak("L40", 181.05, 90.5, ("NVIDIA L40",)),
    GpuPeak("V100 SXM2", 125.0, 15.7, ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB")),  # fp16: no bf16 units
    GpuPeak("V100 PCIe", 112.0, 14.0, ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB")),
    GpuPeak("RTX 4090", 165.2, 82.6, ("NVIDIA GeForce RTX 4090",)),
)


class UnknownGpuError(ValueError):
    """A GPU whose name is not in GPU_PEAKS: its MFU would be a guess, so its peak must be given."""


def _plain(name: str) -> str:
    return " ".join(name.split()).casefold()


def gpu_peak(name: str) -> GpuPeak:
    """The GPU_PEAKS entry whose names hold `name` exactly (case and spacing aside)."""
    for entry in GPU_PEAKS:
        if _plain(name) in map(_plain, entry.names):
            return entry
    raise UnknownGpuError(
        f"GPU '{name}' has no known peak (trident.hardware.GPU_PEAKS matches exact product names, so a "
        f"variant is never given another's figure): set train.peak_tflops (benchmarks/mfu.py: "
        f"--peak-tflops) to its dense bf16 TFLOP/s per GPU from its datasheet (its fp32 figure when "
        f"train.precision=fp32); known: {', '.join(entry.product for entry in GPU_PEAKS)}")

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
        return f"{value:.4g} TFLOP/s from train.peak_tflops"
    if device.type == "cuda":
        import torch

        entry = gpu_peak(torch.cuda.get_device_name(device))
        kind = "fp32" if dtype == torch.float32 else "dense bf16"
        return f"{value:.4g} TFLOP/s, the {kind} datasheet peak of an {entry.product}"
    return (f"{value:.3g} TFLOP/s, this CPU's matmul peak measured once at start (best of 7 trials; "
            f"set train.peak_tflops to fix it)")


def peak_tflops(device, dtype, configured: float = 0.0) -> float:
    """Per-device peak of a torch.device in a torch.dtype: the configured value, else a known GPU's
    datasheet peak (UnknownGpuError for a GPU not in GPU_PEAKS), else measured on CPU."""
    if configured > 0:
        return configured
    import torch

    if device.type == "cuda":
        entry = gpu_peak(torch.cuda.get_device_name(device))
        return entry.fp32 if dtype == torch.float32 else entry.bf16
    return measured_cpu_peak_tflops(dtype)


def refuse_unknown_gpu(device, configured: float = 0.0) -> None:
    """UnknownGpuError at start for a GPU with no known peak and none configured (cheap: no measuring)."""
    if configured <= 0 and device.type == "cuda":
        import torch

        gpu_peak(torch.cuda.get_device_name(device))


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
