"""Silent-corruption check: data-parallel replicas of every parameter shard must be bit-identical
(each replica applies the same reduced gradients, or all-gathers the same ZeRO-1 update). Each rank
digests its shards where they live: on the CPU xxh64 of the bytes; on a GPU (whose weights never
cross to the host) two 64-bit sums over the tensor's 32-bit words, one weighted by position, computed
on the device, of which only the sums of every parameter, in one small copy, reach the host, where
xxh64 folds each pair (every replica of a run digests on the same kind of device). Only the digests
cross the gradient group (dp x cp ranks, which hold the same parameters). A replica whose digest differs from the
others' (the odd one out; with two replicas both are named) is reported with the parameter.

Any single flipped bit changes the position-weighted sum (a word's change times an odd weight is
never 0 modulo 2^64); the second sum mixes each word nonlinearly with its position, so that changes
to several words are not hidden by a linear coincidence. Integer sums wrap the same way in any
order, so the sums depend on the bytes alone, on any device.
"""
from __future__ import annotations

import struct
from collections import Counter

import torch
import torch.distributed as dist
import xxhash

from trident.parallel.watch import watched


CHUNK_WORDS = 1 << 24  # words summed a pass: bounded scratch (int64, 128 MiB) on the device


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


MIX_WORD, MIX_POSITION = _signed(0x9E3779B97F4A7C15), _signed(0xC2B2AE3D27D4EB4F)  # odd 64-bit constants


def sums_on_device(tensor: torch.Tensor) -> torch.Tensor:
    """[2] int64 on the tensor's device: sum of w_i (2 i + 1) and of (w_i M) ^ (i P) (mod 2^64) over
    its bytes as 32-bit words w_i (bytes, when their count is not a multiple of 4)."""
    data = tensor.detach().contiguous().view(-1).view(torch.uint8)
    words = data.view(torch.int32) if data.numel() % 4 == 0 else data
    total = torch.zeros(2, dtype=torch.int64, device=tensor.device)
    for start in range(0, words.numel(), CHUNK_WORDS):
        w = words[start:start + CHUNK_WORDS].to(torch.int64)
        i = torch.arange(start, start + w.numel(), dtype=torch.int64, device=tensor.device)
        total[0] += (w * (2 * i + 1)).sum()
        total[1] += ((w * MIX_WORD) ^ (i * MIX_POSITION)).sum()
    return total


def device_digests(tensors: list[torch.Tensor]) -> list[int]:
    """A 64-bit digest of each tensor's bytes (in its own dtype) from its sums on its device: one copy
    of 2 numbers a tensor to the host for all of them."""
    if not tensors:
        return []
    pairs = torch.stack([sums_on_device(t) for t in tensors]).cpu().tolist()
    return [xxhash.xxh64(struct.pack("<qq", a, b)).intdigest() for a, b in pairs]


def digests(tensors: list[torch.Tensor]) -> list[int]:
    """Each tensor's digest where it lives: xxh64 of a CPU tensor's bytes (the fastest there), the
    device sums of any other (device_digests)."""
    if any(t.device.type != "cpu" for t in tensors):
        return device_digests(tensors)
    return [xxhash.xxh64(t.detach().contiguous().view(-1).view(torch.uint8).numpy()).intdigest() for t in tensors]


def digest(tensor: torch.Tensor) -> int:
    return digests([tensor])[0]


def replica_mismatches(named_params: list, mesh) -> list[dict]:
    """Collective over the gradient group (dp x cp, the ranks holding the same parameters): the
    parameters whose replicas differ, each as {"param": name, "ranks": [global ranks at fault],
    "digests": {rank: hex}}. Empty when dp x cp = 1."""
    group, size, _ = mesh.gradient
    if group is None:
        return []
    mine = digests([param for _, param in named_params])
    gathered: list = [None] * size
    with watched(group, "all_gather weight digests"):
        dist.all_gather_object(gathered, mine, group=group)
    ranks = dist.get_process_group_ranks(group)
    found = []
    for index, (name, _) in enumerate(named_params):
        values = [digests[index] for digests in gathered]
        if len(set(values)) == 1:
            continue
        common, count = Counter(values).most_common(1)[0]
        odd = [r for r, v in zip(ranks, values) if v != common or count * 2 <= len(values)]
        found.append({"param": name, "ranks": odd, "digests": {r: f"{v:016x}" for r, v in zip(ranks, values)}})
    return found


def agree_on_findings(findings: list[dict], mesh, device: torch.device) -> list[dict]:
    """Collective over the world: every rank's findings, so all ranks stop together (each gradient group
    checked only its own shards). One flag all-reduce; the findings travel only when there are some."""
    if mesh.world_size == 1:
        return findings
    flag = torch.tensor([int(bool(findings))], dtype=torch.int32, device=device)
    with watched(None, "all_reduce digest flag"):
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if not flag.item():
        return []
    gathered: list = [None] * mesh.world_size
    with watched(None, "all_gather digest findings"):
        dist.all_gather_object(gathered, findings)
    merged, seen = [], set()
    for rank_findings in gathered:
        for finding in rank_findings:
            key = (finding["param"], tuple(finding["ranks"]))
            if key not in seen:
                seen.add(key)
                merged.append(finding)
    return merged
