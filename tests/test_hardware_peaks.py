"""The MFU denominator of a GPU: its datasheet peak found by the exact name the driver reports, a
variant never given another's figure, and an unknown GPU refused with its peak asked for."""
import pytest
import torch

from trident import hardware
from trident.config import ConfigError
from trident.hardware import GPU_PEAKS, UnknownGpuError, gpu_peak, peak_tflops, refuse_unknown_gpu


@pytest.mark.parametrize("reported, product, bf16", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5),
    ("NVIDIA H200", "H200 SXM", 989.5),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5),
    ("NVIDIA B200", "B200", 2250.0),
    ("NVIDIA GB200", "GB200", 2500.0),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 312.0),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 312.0),
    ("NVIDIA A10", "A10", 125.0),
    ("NVIDIA A10G", "A10G", 70.0),
    ("NVIDIA L4", "L4", 121.0),
    ("NVIDIA L40S", "L40S", 362.05),
    ("NVIDIA L40", "L40", 181.05),
])
def test_each_product_gets_its_own_peak(reported, product, bf16):
    entry = gpu_peak(reported)
    assert (entry.product, entry.bf16) == (product, bf16)


def test_variants_that_share_a_substring_are_told_apart():
    assert gpu_peak("NVIDIA H100 PCIe").bf16 < gpu_peak("NVIDIA H100 NVL").bf16 < gpu_peak("NVIDIA H100 80GB HBM3").bf16
    assert gpu_peak("NVIDIA GB200").product == "GB200" != gpu_peak("NVIDIA B200").product
    assert gpu_peak("NVIDIA A10G").bf16 != gpu_peak("NVIDIA A10").bf16
    assert gpu_peak("nvidia  h100 pcie").product == "H100 PCIe"  # case and spacing aside
    names = [name for entry in GPU_PEAKS for name in entry.names]
    assert len(names) == len({" ".join(n.split()).casefold() for n in names})  # no name in two entries


@pytest.mark.parametrize("reported", ["NVIDIA H100", "NVIDIA RTX A6000", "AMD Instinct MI300X", "NVIDIA A10G-X"])
def test_an_unknown_gpu_is_refused_with_its_peak_asked_for(reported, monkeypatch):
    with pytest.raises(UnknownGpuError, match="train.peak_tflops") as refused:
        gpu_peak(reported)
    assert reported in str(refused.value) and "--peak-tflops" in str(refused.value)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: reported)
    cuda = torch.device("cuda", 0)
    with pytest.raises(UnknownGpuError):
        peak_tflops(cuda, torch.bfloat16)
    with pytest.raises(UnknownGpuError):
        refuse_unknown_gpu(cuda)
    refuse_unknown_gpu(cuda, configured=400.0)  # a configured peak is taken as given
    assert peak_tflops(cuda, torch.bfloat16, configured=400.0) == 400.0


def test_a_known_gpu_gives_its_bf16_and_fp32_peaks(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    cuda = torch.device("cuda", 0)
    assert peak_tflops(cuda, torch.bfloat16) == 756.5 and peak_tflops(cuda, torch.float32) == 51.0
    assert "H100 PCIe" in hardware.describe_peak(cuda, torch.bfloat16)


def test_the_trainer_refuses_an_unknown_gpu_at_start(monkeypatch, tmp_path):
    """A config mistake (exit 2): ConfigError before the model is built."""
    from train_fixtures import VOCAB, RandomTokens, tiny_config
    from trident.train import trainer

    monkeypatch.setattr(trainer, "rank_device", lambda device: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Future GPU")
    with pytest.raises(ConfigError, match="GPU 'NVIDIA Future GPU' has no known peak"):
        trainer.Trainer(tiny_config("train.peak_tflops=0"), tmp_path, datasets=(RandomTokens(32), None),
                        vocab_size=VOCAB)
