"""An audit of the collectives a rank issues: every torch.distributed collective and point-to-point call
wrapped (in a forked rank: the wrappers die with it) to record what it was handed, and a check that
each tensor is on the run's device and each object collective or barrier goes through a group that has
a CPU backend (NCCL carries only GPU tensors: issue 59 item 2)."""
from __future__ import annotations

import functools

# isend / irecv stay as they are (P2POp checks its op is torch's own): trident posts them through batch_isend_irecv
TENSOR_CALLS = ("broadcast", "all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
                "gather", "scatter", "send", "recv", "batch_isend_irecv")
OBJECT_CALLS = ("all_gather_object", "broadcast_object_list", "gather_object", "barrier")


def audit_collectives() -> list[dict]:
    """Start recording: returns the list each later call appends {"call", "devices", "group_devices"} to."""
    import torch
    import torch.distributed as dist

    calls: list[dict] = []

    def recorded(name, real):
        @functools.wraps(real)
        def call(*args, **kwargs):
            values = [*args, *kwargs.values()]
            if name == "batch_isend_irecv":
                values = [op.tensor for op in args[0]]
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            tensors += [t for v in values if isinstance(v, list) for t in v if isinstance(t, torch.Tensor)]
            group = kwargs.get("group") or (args[0][0].group if name == "batch_isend_irecv" else None)
            types = (group or dist.group.WORLD)._device_types
            calls.append({"call": name, "devices": {str(t.device) for t in tensors},
                          "group_devices": {str(device) for device in types}})
            return real(*args, **kwargs)
        return call

    for name in TENSOR_CALLS + OBJECT_CALLS:
        setattr(dist, name, recorded(name, getattr(dist, name)))
    return calls


def misplaced(calls: list[dict], device: str) -> list[dict]:
    """The recorded calls that break the rule: a tensor off `device`, an object collective or barrier
    on a group without a CPU backend."""
    return [c for c in calls if (c["call"] in OBJECT_CALLS and "cpu" not in c["group_devices"])
            or (c["call"] in TENSOR_CALLS and c["devices"] - {device})]
