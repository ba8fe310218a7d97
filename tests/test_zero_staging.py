"""The planner's ZeRO-2/3 staging costs only the first backwards of a step (plan/zero_buffers.py): its
result equals walking every micro-batch's backward, for every stage of every layout of a search."""
from trident.config import load_config
from trident.parallel.layout_rules import REDUCTIONS_IN_FLIGHT
from trident.plan import memory, zero_buffers
from trident.plan.search import candidate_layouts


def _every_backward(config, layout, stage, micro_batches, flight, activations_at):
    """The walk over all micro-batches the planner shortens (as it was written before)."""
    order = zero_buffers.completion_order(config, layout, stage)
    launches = [4 * (1 + 1 / layout.shard) * n for n in order * max(micro_batches, 1)]
    peak = activations_at(flight)
    highest = peak + 4 * order[0]
    for j in range(1, micro_batches):
        before = j * len(order)
        highest = max(highest, activations_at(min(flight, micro_batches - j)) +
                      sum(launches[max(0, before - REDUCTIONS_IN_FLIGHT):before]))
    return highest - peak, sum(launches[-REDUCTIONS_IN_FLIGHT:])


def test_staging_equals_the_walk_over_every_micro_batch(monkeypatch):
    checked = []

    def both(*args):
        fast = zero_buffers.staging_bytes(*args)
        assert fast == _every_backward(*args), args[2:5]
        checked.append(args[3])
        return fast

    monkeypatch.setattr(memory, "staging_bytes", both)
    config = load_config("gpt-1.3b", ["train.global_batch_size=32"])
    for layout in candidate_layouts(config, 8, grad_dtype="fp32", gpus_per_node=4):
        if layout.zero_effective >= 2 and layout.micro_batch in (1, 4):
            memory.memory_per_gpu(config, layout, flash_attention=True)
    assert len(checked) > 50 and max(checked) >= 16  # many layouts, up to many micro-batches each
