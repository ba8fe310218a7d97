"""Pipeline schedules as data: each compute happens once, in order, transfers pair up, memory bounds hold."""
from collections import Counter

import pytest

from trident.parallel.pipeline.registry import build_schedule
from trident.parallel.pipeline.schedules import (Backward, Forward, RecvActivation, RecvGrad, ScheduleError,
                                                 SendActivation, SendGrad, forward_only, gpipe, interleaved_1f1b,
                                                 one_f_one_b, peak_inflight)
from trident.parallel.pipeline.overlap import CONTRACTS
from trident.parallel.pipeline.simulate import simulate


def cases():
    """(name, pp, m, v) for pp 1..8, several m (m < pp too where allowed), v in 1..3 for interleaved."""
    for pp in range(1, 9):
        for m in sorted({1, 2, 3, pp, pp + 1, 2 * pp, 3 * pp}):
            yield "gpipe", pp, m, 1
            yield "1f1b", pp, m, 1
            if m % pp == 0:
                for v in (1, 2, 3):
                    yield "interleaved", pp, m, v


ALL = list(cases())
# One test item per (schedule, pp) keeps the sweep cheap to collect; messages name every case.
GROUPS = sorted({(name, pp) for name, pp, _, _ in ALL})


def group(name, pp):
    return [(m, v) for n, p, m, v in ALL if (n, p) == (name, pp)]


def virtual_index(stage, chunk, pp):
    return chunk * pp + stage


@pytest.mark.parametrize("name,pp", GROUPS)
def test_every_microbatch_forwarded_then_backwarded_once_per_chunk(name, pp):
    for m, v in group(name, pp):
        check_compute_once_in_order(build_schedule(name, pp, m, v), pp, m, v)


def check_compute_once_in_order(schedule, pp, m, v):
    assert len(schedule) == pp
    for stage, ops in enumerate(schedule):
        forwards = [(op.microbatch, op.chunk) for op in ops if isinstance(op, Forward)]
        backwards = [(op.microbatch, op.chunk) for op in ops if isinstance(op, Backward)]
        everything = {(mb, c) for mb in range(m) for c in range(v)}
        assert Counter(forwards) == Counter(everything), f"pp={pp} m={m} v={v} stage {stage}"
        assert Counter(backwards) == Counter(everything), f"pp={pp} m={m} v={v} stage {stage}"
        position = {op: i for i, op in enumerate(ops)}
        for mb, c in everything:
            assert position[Forward(mb, c)] < position[Backward(mb, c)]


@pytest.mark.parametrize("name,pp", GROUPS)
def test_every_send_has_one_matching_receive_in_the_same_order(name, pp):
    for m, v in group(name, pp):
        check_transfers_pair_up(build_schedule(name, pp, m, v), pp, m, v)


def check_transfers_pair_up(schedule, pp, m, v):
    sent, received = {}, {}
    for stage, ops in enumerate(schedule):
        for op in ops:
            # Name every tensor by what it is: (kind, micro-batch, virtual stage that consumes it).
            if isinstance(op, SendActivation):
                sent.setdefault((stage, op.to_stage), []).append(("act", op.microbatch, virtual_index(stage, op.chunk, pp) + 1))
            elif isinstance(op, SendGrad):
                sent.setdefault((stage, op.to_stage), []).append(("grad", op.microbatch, virtual_index(stage, op.chunk, pp) - 1))
            elif isinstance(op, RecvActivation):
                received.setdefault((op.from_stage, stage), []).append(("act", op.microbatch, virtual_index(stage, op.chunk, pp)))
            elif isinstance(op, RecvGrad):
                received.setdefault((op.from_stage, stage), []).append(("grad", op.microbatch, virtual_index(stage, op.chunk, pp)))
    assert sent == received, f"pp={pp} m={m} v={v}"
    for (src, dst), tensors in sent.items():
        assert src != dst
        for kind, _, consumer in tensors:
            assert consumer % pp == dst  # the right peer
            assert 0 <= consumer < pp * v
    # Every boundary between virtual stages on different ranks carries every micro-batch both ways.
    crossing = sum(1 for i in range(pp * v - 1) if i % pp != (i + 1) % pp)
    assert sum(len(t) for t in sent.values()) == 2 * m * crossing


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("name,pp", GROUPS)
def test_simulation_completes_and_honours_data_dependencies(name, pp, contract):
    for m, v in group(name, pp):
        check_timeline_respects_dependencies(simulate(build_schedule(name, pp, m, v), contract=contract), pp, m, v)


def check_timeline_respects_dependencies(timeline, pp, m, v):
    box = {(b.kind, b.stage, b.microbatch, b.chunk): b for b in timeline.compute_boxes}
    assert len(box) == 2 * pp * m * v, f"pp={pp} m={m} v={v}"
    for mb in range(m):
        for i in range(1, pp * v):  # forward of virtual stage i waits for virtual stage i - 1
            here, there = (i % pp, mb, i // pp), ((i - 1) % pp, mb, (i - 1) // pp)
            assert box[("forward", *here)].start >= box[("forward", *there)].end - 1e-9
            assert box[("backward", *there)].start >= box[("backward", *here)].end - 1e-9
        last = ((pp * v - 1) % pp, mb, v - 1)
        assert box[("backward", *last)].start >= box[("forward", *last)].end - 1e-9
    for stage in range(pp):  # one thing at a time per stage: compute or blocked (transfers fly behind)
        mine = sorted((b.start, b.end) for b in timeline.boxes if b.stage == stage and b.kind not in ("send", "recv"))
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(mine, mine[1:]))


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("name,pp", GROUPS)
def test_forward_only_schedules_complete(name, pp, contract):
    # Evaluation runs the same lists minus the backward work; that must not hang either.
    for m, v in group(name, pp):
        timeline = simulate(forward_only(build_schedule(name, pp, m, v)), backward=False, contract=contract)
        assert {b.kind for b in timeline.compute_boxes} == {"forward"} and len(timeline.compute_boxes) == pp * m * v
    with pytest.raises(ScheduleError, match="never runs Backward"):
        simulate(forward_only(build_schedule(name, pp, 2 * pp, 1)))
    with pytest.raises(ScheduleError, match="backward work in a forward-only schedule"):
        simulate(build_schedule(name, pp, 2 * pp, 1), backward=False)


@pytest.mark.parametrize("pp,m", [(1, 1), (2, 1), (4, 2), (4, 4), (4, 9), (8, 16)])
def test_peak_inflight_activations(pp, m):
    assert peak_inflight(gpipe(pp, m)) == [m] * pp
    assert peak_inflight(one_f_one_b(pp, m)) == [min(pp - s, m) for s in range(pp)]
    assert max(peak_inflight(one_f_one_b(pp, m))) <= pp


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 16, 3), (8, 8, 2), (3, 9, 3)])
def test_interleaved_peak_within_megatron_bound(pp, m, v):
    # Megatron keeps warm-up + 1 chunk activations: (pp - s - 1) * 2 + (v - 1) * pp + 1, at most m * v.
    bound = [min((pp - s - 1) * 2 + (v - 1) * pp + 1, m * v) for s in range(pp)]
    assert peak_inflight(interleaved_1f1b(pp, m, v)) == bound
    # Each chunk set is 1/v of a stage's layers: in stage units, stage 0 keeps < pp + 2 (1F1B keeps pp).
    assert bound[0] / v < pp + 2


def test_schedule_instructions_are_frozen_values():
    op = Forward(1, 0)
    assert op == Forward(1, 0) and hash(op) == hash(Forward(1, 0))
    with pytest.raises(AttributeError):
        op.microbatch = 2


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ScheduleError, match="unknown pipeline schedule 'zigzag'"):
        build_schedule("zigzag", 2, 4)
    with pytest.raises(ScheduleError, match="multiple of pp"):
        interleaved_1f1b(4, 6, 2)
    with pytest.raises(ScheduleError, match="virtual_stages=2 needs schedule 'interleaved'"):
        build_schedule("1f1b", 2, 4, 2)
    with pytest.raises(ScheduleError, match="pp must be a positive integer"):
        one_f_one_b(0, 4)
    with pytest.raises(ScheduleError, match="num_microbatches must be a positive integer"):
        gpipe(2, 0)
    with pytest.raises(ScheduleError, match="virtual_stages must be a positive integer"):
        interleaved_1f1b(2, 2, 0)
    with pytest.raises(ScheduleError, match="num_microbatches must be a positive integer"):
        one_f_one_b(2, 2.0)
