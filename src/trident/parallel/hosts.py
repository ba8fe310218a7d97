"""Which host every rank runs on, and the rule that a tensor-parallel group stays on one host.

TP exchanges activations several times per layer: across hosts (InfiniBand instead of NVLink) a
530B step slows by an order of magnitude, so a layout that would do it is refused at start unless
`parallel.allow_tp_across_hosts` says it is meant (a layout mistake, not a slow run discovered later).
"""
from __future__ import annotations

import socket

import torch.distributed as dist

from trident.config import ConfigError
from trident.parallel.mesh import group_ranks


def gather_hosts() -> list[str]:
    """Every rank's host name, in rank order (collective with several ranks)."""
    host = socket.gethostname()
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [host]
    hosts: list = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, host)
    return hosts


def tp_groups_across_hosts(hosts: list[str], dp: int, pp: int, tp: int, cp: int = 1) -> list[dict]:
    """The TP groups whose ranks are not all on one host, as {rank: host}."""
    return [{rank: hosts[rank] for rank in ranks} for ranks in group_ranks(dp, pp, tp, cp)["tp"]
            if len({hosts[rank] for rank in ranks}) > 1]


def describe_hosts(hosts: list[str]) -> str:
    """`2 hosts: node-a (ranks 0-7), node-b (ranks 8-15)`; ranks listed as ranges."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    parts = [f"{host} (ranks {_ranges(ranks)})" for host, ranks in by_host.items()]
    return f"{len(by_host)} host{'s' if len(by_host) > 1 else ''}: " + ", ".join(parts)


def _ranges(ranks: list[int]) -> str:
    spans, start = [], ranks[0]
    for previous, rank in zip(ranks, ranks[1:] + [None]):
        if rank != previous + 1:
            spans.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = rank
    return ",".join(spans)


def check_tp_hosts(mesh, allowed: bool, log=print) -> list[str]:
    """Collective: report the hosts (rank 0 logs one line) and raise ConfigError naming the ranks and
    hosts of a TP group that spans hosts, unless `allowed`. Returns the hosts in rank order."""
    hosts = gather_hosts()
    if len(hosts) > 1:
        log(f"hosts: {describe_hosts(hosts)}")
    split = tp_groups_across_hosts(hosts, mesh.dp, mesh.pp, mesh.tp, mesh.cp)
    if split and not allowed:
        shown = "; ".join(", ".join(f"rank {r} on {h}" for r, h in group.items()) for group in split[:3])
        raise ConfigError(f"parallel.tp={mesh.tp}: {len(split)} tensor-parallel group(s) span hosts ({shown}"
                          f"{'; ...' if len(split) > 3 else ''}); make tp divide the processes per host, or set "
                          f"parallel.allow_tp_across_hosts=true if this is meant")
    return hosts
