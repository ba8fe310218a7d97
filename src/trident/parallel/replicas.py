"""Silent-corruption check: data-parallel replicas of every parameter shard must be bit-identical
(each replica applies the same reduced gradients, or all-gathers the same ZeRO-1 update). Each rank
hashes its shards (xxh64 of the bytes); only the digests cross the gradient group (dp x cp ranks,
which hold the same parameters). A replica whose digest differs from the others' (the odd one out;
with two replicas both are named) is reported with the parameter.
"""
from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist
import xxhash

from trident.parallel.watch import watched


def digest(tensor: torch.Tensor) -> int:
    """xxh64 of a tensor's bytes, in its own dtype (copied to the host when it lives on a device)."""
    data = tensor.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy()
    return xxhash.xxh64(data).intdigest()


def replica_mismatches(named_params: list, mesh) -> list[dict]:
    """Collective over the gradient group (dp x cp, the ranks holding the same parameters): the
    parameters whose replicas differ, each as {"param": name, "ranks": [global ranks at fault],
    "digests": {rank: hex}}. Empty when dp x cp = 1."""
    group, size, _ = mesh.gradient
    if group is None:
        return []
    mine = [digest(param) for _, param in named_params]
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
