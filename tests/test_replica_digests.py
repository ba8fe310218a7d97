"""Replica digests computed where the weights live: on a device from sums that are a function of the
bytes alone (the same on any device) and never a copy of the tensor to the host; on the CPU xxh64 of
the bytes. Either is changed by any flipped bit."""
import random

import pytest
import torch

from trident.parallel.replicas import device_digests, digest, digests, sums_on_device

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("of", [digest, lambda t: device_digests([t])[0]], ids=["host", "device"])
@pytest.mark.parametrize("dtype, shape", [(torch.float32, (300, 70)), (torch.bfloat16, (301, 7)),
                                          (torch.bfloat16, (3,)), (torch.float32, ())])
def test_every_flipped_bit_changes_the_digest(of, dtype, shape):
    torch.manual_seed(0)
    weights = torch.randn(shape).to(dtype)
    base = of(weights)
    assert of(weights.clone()) == base
    raw = weights.view(-1).view(torch.uint8)
    rng = random.Random(0)
    for byte in {0, raw.numel() - 1, *(rng.randrange(raw.numel()) for _ in range(20))}:
        for bit in range(8):
            flipped = raw.clone()
            flipped[byte] ^= 1 << bit
            assert of(flipped.view(dtype)) != base, (byte, bit)


def test_moved_or_reordered_values_change_the_digest():
    torch.manual_seed(0)
    weights = torch.randn(64, 64)
    swapped = weights.clone()
    swapped[3, 5], swapped[40, 1] = weights[40, 1], weights[3, 5]
    for of in (digests, device_digests):
        found = of([weights, swapped, weights.t().contiguous(), weights.to(torch.bfloat16)])
        assert len(set(found)) == 4


def test_the_sums_stay_on_the_tensors_device():
    """On the meta device (no values to copy) the sums are a meta tensor: nothing went to the host."""
    sums = sums_on_device(torch.empty(5000, 3, device="meta", dtype=torch.bfloat16))
    assert sums.device.type == "meta" and sums.shape == (2,) and sums.dtype == torch.int64


@pytest.mark.parametrize("device", DEVICES)
def test_a_device_digest_depends_on_the_bytes_alone(device):
    torch.manual_seed(0)
    tensors = [torch.randn(1000, 257), torch.randn(33).to(torch.bfloat16), torch.randn(5, 5)[:, 1]]
    moved = [t.to(device) for t in tensors]
    assert device_digests(moved) == device_digests(tensors)
    assert digests(moved) == (digests(tensors) if device == "cpu" else device_digests(tensors))
