"""Overlapped pipeline messages: the plan (when each transfer is posted and waited for) is derived
from the schedule alone, cannot deadlock, hides communication behind compute in the simulator, and
the executor on real gloo ranks performs exactly that plan, with receives visibly in flight while
it computes."""
from bisect import bisect_left

import pytest

from distributed import run_distributed
from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.parallel.pipeline.overlap import (CONTRACTS, Post, Run, Wait, build_plan, consumer, last_backwards,
                                               producer, schedule_for)
from trident.parallel.pipeline.registry import build_schedule
from trident.parallel.pipeline.schedules import (COMMUNICATION, COMPUTE, RECVS, SENDS, Backward, Forward,
                                                 RecvActivation, RecvGrad, ScheduleError, SendActivation,
                                                 one_f_one_b)
from trident.parallel.pipeline.simulate import simulate
from trident.parallel.pipeline.timeline import COMPUTE_KINDS


def layouts():
    """The executor tests' layouts (pp 2 and 4, one or two chunks) with m = pp, 2 pp and odd."""
    for pp in (2, 4):
        for m in (pp, 2 * pp, 2 * pp + 1):
            yield "gpipe", pp, m, 1
            yield "1f1b", pp, m, 1
            if m % pp == 0:
                yield "interleaved", pp, m, 2


LAYOUTS = list(layouts())


def positions(plan):
    """list position -> (where it is posted, where it is waited for, where it runs) in the plan."""
    post, wait, run = {}, {}, {}
    for at, action in enumerate(plan):
        if isinstance(action, Post):
            for i in action.indices:
                assert i not in post, f"transfer {i} posted twice"
                post[i] = at
        elif isinstance(action, Wait):
            assert action.index not in wait, f"transfer {action.index} waited for twice"
            wait[action.index] = at
        else:
            run[action.index] = at
    return post, wait, run


@pytest.mark.parametrize("contract", CONTRACTS)
def test_plan_posts_and_waits_every_transfer_once_and_runs_compute_in_list_order(contract):
    for name, pp, m, v in LAYOUTS:
        for ops in schedule_for(name, pp, m, v, contract):
            plan = build_plan(ops, contract)
            post, wait, run = positions(plan)
            transfers = [i for i, op in enumerate(ops) if isinstance(op, COMMUNICATION)]
            assert sorted(post) == sorted(wait) == transfers
            assert [a.index for a in plan if isinstance(a, Run)] == [i for i, op in enumerate(ops)
                                                                      if isinstance(op, COMPUTE)]
            for i in transfers:
                assert post[i] < wait[i]
                if isinstance(ops[i], RECVS):  # waited for before the compute that uses it
                    assert wait[i] < run[consumer(ops, i)]
                    continue
                assert post[i] > run[producer(ops, i)]  # posted only once its tensor exists ...
                following = [c for c in run if c > i]  # ... and no later than the list has it
                assert not following or post[i] < run[min(following)]
                if contract == "batched":  # batched: exactly where the list has it
                    assert post[i] > run[max(c for c in run if c < i)]
            # Posts keep list order per direction and peer: the i-th send still meets the i-th receive.
            for kind in (SENDS, RECVS):
                for peer in range(pp):
                    mine = [i for i in sorted(post, key=post.get) if isinstance(ops[i], kind)
                            and (ops[i].to_stage if kind is SENDS else ops[i].from_stage) == peer]
                    assert mine == sorted(mine)


def test_overlapped_plan_of_1f1b_by_hand():
    # pp=2, m=2, stage 1: receive the next activation while computing, send the gradient behind
    # the next compute.
    ops = one_f_one_b(2, 2)[1]
    assert ops == [RecvActivation(0, 0, 0), Forward(0, 0), Backward(0, 0), ops[3], RecvActivation(1, 0, 0),
                   Forward(1, 0), Backward(1, 0), ops[7]]
    assert build_plan(ops, "overlapped") == [Post((0,)), Wait(0), Run(1), Post((4,)), Run(2), Post((3,)),
                                             Wait(4), Run(5), Wait(3), Run(6), Post((7,)), Wait(7)]
    assert build_plan(ops, "batched") == [Post((0,)), Wait(0), Run(1), Run(2), Post((3, 4)), Wait(3), Wait(4),
                                          Run(5), Run(6), Post((7,)), Wait(7)]
    with pytest.raises(ScheduleError, match="unknown pipeline contract 'eager'"):
        build_plan(ops, "eager")


@pytest.mark.parametrize("comm_time", [0.0, 0.05, 0.3, 2.0])
def test_no_layout_deadlocks_and_overlap_is_never_slower(comm_time):
    for name, pp, m, v in LAYOUTS:
        overlapped = simulate(schedule_for(name, pp, m, v, "overlapped"), comm_time=comm_time, contract="overlapped")
        batched = simulate(schedule_for(name, pp, m, v, "batched"), comm_time=comm_time, contract="batched")
        assert overlapped.makespan <= batched.makespan + 1e-9, (name, pp, m, v)
        if comm_time == 0:  # free messages: both reach the theoretical bubble
            assert overlapped.bubble_fraction == pytest.approx((pp - 1) / (m * v), abs=1e-9)


@pytest.mark.parametrize("name,pp,m,v", [("1f1b", 2, 4, 1), ("interleaved", 2, 4, 2), ("1f1b", 4, 8, 1),
                                         ("interleaved", 4, 8, 2)])
def test_overlap_hides_communication_that_batching_exposes(name, pp, m, v):
    # Batched, a stage also waits for its sends to be received before computing on; overlapped,
    # only the transfers the pipeline's own dependencies put on the critical path cost time.
    free = simulate(build_schedule(name, pp, m, v), comm_time=0.0).makespan
    overlapped = simulate(schedule_for(name, pp, m, v, "overlapped"), comm_time=0.1).makespan - free
    batched = simulate(schedule_for(name, pp, m, v, "batched"), comm_time=0.1, contract="batched").makespan - free
    assert 0 < overlapped < batched


@pytest.mark.parametrize("name,pp,v", [("1f1b", 2, 1), ("1f1b", 4, 1), ("interleaved", 2, 2), ("interleaved", 4, 2)])
def test_overlapped_messages_cost_the_fill_and_drain_only(name, pp, v):
    # With overlapped messages (1F1B's slack, sends posted as soon as their tensor exists) only the
    # hops of the pipeline's fill and drain wait for a transfer: the time messages add to a step is
    # the same for 8 micro-batches as for 16. Batched, every micro-batch adds its own.
    def added(m, contract):
        schedule = schedule_for(name, pp, m, v, contract)
        return (simulate(schedule, 1.0, 2.0, comm_time=0.05, contract=contract).makespan
                - simulate(schedule, 1.0, 2.0, contract=contract).makespan)
    assert added(16, "overlapped") == pytest.approx(added(8, "overlapped"), abs=1e-9)
    assert added(16, "batched") > added(8, "batched") + 0.05


def test_sends_are_posted_as_soon_as_their_tensor_exists():
    # Interleaved 1F1B's steady step lists a forward's send after the backward that follows it (one
    # batched exchange per step, as Megatron); overlapped, the send is posted before that backward.
    ops = schedule_for("interleaved", 2, 4, 2, "overlapped")[0]
    plan = build_plan(ops, "overlapped")
    post, _, run = positions(plan)
    late = [i for i, op in enumerate(ops) if isinstance(op, SendActivation) and not isinstance(ops[i - 1], Forward)]
    assert late, "the list has no send after a later compute"
    for i in late:
        assert run[producer(ops, i)] < post[i] < run[i - 1]


def _executor_rank(rank, world, schedule, virtual, m, out_dir):
    from trident.train.trainer import Trainer

    config = tiny_config(f"parallel.pp={world}", f"parallel.schedule={schedule}", f"parallel.virtual_stages={virtual}",
                         f"train.global_batch_size={2 * m}", "train.micro_batch_size=2",
                         f"model.num_layers={world * virtual}")
    trainer = Trainer(config, f"{out_dir}/r{rank}", datasets=(RandomTokens(config.model.seq_length), None),
                      vocab_size=VOCAB, log=lambda *a: None)
    executor = trainer.model.executor
    batches = list(trainer.micro_batches(2 * m, trainer.train_data, 0))
    results = {}
    for contract in CONTRACTS:
        executor.set_contract(contract)
        done = []
        executor.recorder.start()
        loss = executor.run(batches, m, on_chunk_backward_done=lambda c: done.append((c, executor.trace[-1])))
        boxes = executor.recorder.stop()
        ops, plan = executor.plan(m, True)
        results[contract] = {"ops": ops, "plan": plan, "trace": executor.trace, "boxes": boxes,
                             "loss": loss.item(), "done": done}
    return results


def spans_a_compute(recv, boxes) -> bool:
    return any(b.kind in COMPUTE_KINDS and recv.start <= b.start and b.end <= recv.end for b in boxes)


def check_executor_follows_plan(results, v):
    for stage, by_contract in enumerate(results):
        for contract, got in by_contract.items():
            ops, plan = got["ops"], got["plan"]
            assert plan == build_plan(ops, contract)  # the simulator's model of this stage
            assert got["trace"] == plan, f"stage {stage} ({contract}) did not perform its plan"
            final = last_backwards(ops)
            assert sorted(chunk for chunk, _ in got["done"]) == list(range(v))
            assert all(last == Run(final[chunk]) for chunk, last in got["done"])
        losses = {got["loss"] for got in by_contract.values()}
        assert len(losses) == 1  # same arithmetic in the same order, whatever the messages do


def post_positions(boxes, stage):
    """Each transfer of `stage` with the number of compute boxes that started before it was posted."""
    starts = sorted(b.start for b in boxes if b.stage == stage and b.kind in COMPUTE_KINDS)
    return sorted((b.kind, b.microbatch, b.chunk, bisect_left(starts, b.start)) for b in boxes
                  if b.stage == stage and b.kind in ("send", "recv"))


def check_posts_match_the_simulator(results, schedule, virtual, m):
    # Times, not the executor's own trace: where the measured posts fall among the measured computes
    # is where the simulator of the same plan puts them.
    for contract in CONTRACTS:
        simulated = simulate(schedule_for(schedule, len(results), m, virtual, contract), contract=contract)
        for stage, by_contract in enumerate(results):
            assert post_positions(by_contract[contract]["boxes"], stage) == post_positions(simulated.boxes, stage)


def check_overlap_is_visible(results):
    for stage, by_contract in enumerate(results):
        for contract, got in by_contract.items():
            post, wait, _ = positions(got["plan"])
            recvs = [b for b in got["boxes"] if b.kind == "recv"]
            assert len(recvs) == sum(isinstance(op, RECVS) for op in got["ops"])
            in_flight = sum(spans_a_compute(r, got["boxes"]) for r in recvs)
            # A receive posted before a compute that precedes its wait is in flight during it.
            expected = sum(any(isinstance(a, Run) for a in got["plan"][post[i]:wait[i]])
                           for i, op in enumerate(got["ops"]) if isinstance(op, RECVS))
            if contract == "batched":
                assert in_flight == expected == 0
            else:
                assert in_flight == expected >= len(recvs) - 1, f"stage {stage}: {in_flight} of {len(recvs)}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pp,schedule,virtual,m", [(2, "1f1b", 1, 4), (2, "1f1b", 1, 5), (2, "interleaved", 2, 4),
                                                   (4, "interleaved", 2, 4), (2, "zb-h1", 1, 4),
                                                   (2, "zb-h2", 1, 4)])
def test_executor_performs_the_plan_with_receives_in_flight_during_compute(pp, schedule, virtual, m, tmp_path):
    results = run_distributed(_executor_rank, pp, schedule, virtual, m, str(tmp_path), timeout=80)
    check_executor_follows_plan(results, virtual)
    check_posts_match_the_simulator(results, schedule, virtual, m)
    check_overlap_is_visible(results)


def test_consumer_and_last_backwards():
    ops = one_f_one_b(2, 2)[0]  # F0 S F1 S R B0 R B1
    assert consumer(ops, ops.index(RecvGrad(1, 0, 1))) == ops.index(Backward(1, 0))
    assert last_backwards(ops) == {0: ops.index(Backward(1, 0))}
    assert isinstance(ops[1], SendActivation)
    with pytest.raises(ScheduleError, match="nothing after it consumes"):
        consumer([RecvGrad(0, 0, 1)], 0)
