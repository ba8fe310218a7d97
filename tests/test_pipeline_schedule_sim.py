"""Simulated timelines: bubble against theory, deadlock and mismatch detection, JSON form, picture, CLI."""
import json

import pytest

from trident.cli import main
from trident.parallel.pipeline.draw import draw_timeline
from trident.parallel.pipeline.registry import build_schedule
from trident.parallel.pipeline.schedules import (Backward, Forward, RecvActivation, RecvGrad, ScheduleError,
                                                 SendActivation, SendGrad, gpipe, interleaved_1f1b, one_f_one_b,
                                                 theoretical_bubble)
from trident.parallel.pipeline.simulate import check_schedule, simulate
from trident.parallel.pipeline.timeline import Box, Timeline, TimelineRecorder


def test_theoretical_bubble():
    assert theoretical_bubble(4, 8) == 3 / 8
    assert theoretical_bubble(4, 8, 2) == 3 / 16
    assert theoretical_bubble(1, 5) == 0
    with pytest.raises(ScheduleError):
        theoretical_bubble(0, 8)


@pytest.mark.parametrize("pp,m", [(2, 2), (4, 8), (4, 16), (8, 8), (5, 3)])
@pytest.mark.parametrize("fwd,bwd", [(1.0, 2.0), (1.0, 1.0), (3.0, 1.0)])
def test_one_f_one_b_bubble_is_exactly_theory(pp, m, fwd, bwd):
    # Every stage idles (pp - 1) * (f + b) around m * (f + b) of work, whatever the f:b split.
    timeline = simulate(one_f_one_b(pp, m), fwd, bwd)
    assert timeline.makespan == pytest.approx((m + pp - 1) * (fwd + bwd))
    assert timeline.bubble_fraction == pytest.approx((pp - 1) / m, abs=1e-12)
    assert simulate(gpipe(pp, m), fwd, bwd).bubble_fraction == pytest.approx((pp - 1) / m, abs=1e-12)


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 16, 2), (4, 8, 3), (8, 16, 2)])
def test_interleaving_divides_the_bubble_by_the_chunk_count(pp, m, v):
    interleaved = simulate(interleaved_1f1b(pp, m, v))
    assert interleaved.bubble_fraction == pytest.approx(theoretical_bubble(pp, m, v), abs=1e-9)
    assert interleaved.bubble_fraction < simulate(one_f_one_b(pp, m)).bubble_fraction
    assert interleaved.makespan < simulate(one_f_one_b(pp, m)).makespan


def test_communication_time_lengthens_the_step():
    free, costly = simulate(one_f_one_b(4, 8)), simulate(one_f_one_b(4, 8), comm_time=0.25)
    assert costly.makespan > free.makespan
    # Waits (comm boxes) block longer; every transfer takes at least comm_time from its post.
    assert sum(costly.wait_time(s) for s in range(4)) > sum(free.wait_time(s) for s in range(4))
    transfers = [b for b in costly.boxes if b.kind in ("send", "recv")]
    assert len(transfers) == 2 * 2 * 8 * 3 and all(b.end - b.start >= 0.25 - 1e-12 for b in transfers)
    assert costly.bubble_fraction > free.bubble_fraction


def test_deadlock_is_detected_and_named():
    # Stage 0 waits for a gradient before sending the activation stage 1 needs to produce it.
    schedule = [
        [Forward(0, 0), SendActivation(0, 0, 1), Forward(1, 0), RecvGrad(0, 0, 1), Backward(0, 0),
         SendActivation(1, 0, 1), RecvGrad(1, 0, 1), Backward(1, 0)],
        [RecvActivation(0, 0, 0), Forward(0, 0), RecvActivation(1, 0, 0), Forward(1, 0), Backward(0, 0),
         SendGrad(0, 0, 0), Backward(1, 0), SendGrad(1, 0, 0)],
    ]
    check_schedule(schedule)  # each list is fine on its own; only running them together hangs
    with pytest.raises(ScheduleError, match=r"deadlock: stage 0 waits at instruction 3 RecvGrad.*stage 1 waits"):
        simulate(schedule, contract="batched")
    # Overlapped, stage 0 posts SendActivation(1) as soon as Forward(1) has run, before its wait.
    assert simulate(schedule, contract="overlapped").makespan > 0


def test_steady_state_pairs_send_and_receive_for_one_batch():
    # The executor batches adjacent transfers: 1F1B's steady state relies on it
    # (Megatron's send_forward_recv_backward / send_backward_recv_forward).
    ops = one_f_one_b(4, 8)[1]
    steady = [i for i, op in enumerate(ops) if isinstance(op, Forward) and op.microbatch >= 2]
    for i in steady:
        mb = ops[i].microbatch
        assert ops[i + 1] == SendActivation(mb, 0, 2)
        assert ops[i + 2] == RecvGrad(mb - 2, 0, 2)
        assert ops[i + 3] == Backward(mb - 2, 0)
        assert ops[i + 4] == SendGrad(mb - 2, 0, 0)


def test_transfers_out_of_order_between_two_stages_are_a_mismatch():
    stage0 = [Forward(0, 0), Forward(1, 0), SendActivation(0, 0, 1), SendActivation(1, 0, 1),
              RecvGrad(0, 0, 1), RecvGrad(1, 0, 1), Backward(0, 0), Backward(1, 0)]
    stage1 = [RecvActivation(1, 0, 0), RecvActivation(0, 0, 0), Forward(0, 0), Forward(1, 0),
              Backward(0, 0), Backward(1, 0), SendGrad(0, 0, 0), SendGrad(1, 0, 0)]
    with pytest.raises(ScheduleError, match=r"transfer mismatch 0->1: stage 0 instruction 2 SendActivation"
                                            r"\(microbatch=0.* meets stage 1 instruction 0 RecvActivation\(microbatch=1"):
        check_schedule([stage0, stage1])
    stage1[0], stage1[1] = stage1[1], stage1[0]
    timeline = simulate([stage0, stage1], contract="batched")  # in order, the same lists run
    assert timeline.makespan == pytest.approx(12.0)  # two forwards, then stage 1's 2+4, then 4
    # Overlapped, each send leaves right after its compute: stage 1 starts at 1 and stage 0's
    # backwards follow each gradient (1 + 6 on stage 1, then stage 0's last backward).
    assert simulate([stage0, stage1]).makespan == pytest.approx(9.0)


def test_mismatched_and_self_waiting_schedules_are_rejected():
    good = one_f_one_b(2, 2)
    crossed = [list(good[0]), list(good[1])]
    i, j = crossed[0].index(SendActivation(0, 0, 1)), crossed[0].index(SendActivation(1, 0, 1))
    crossed[0][i], crossed[0][j] = SendActivation(1, 0, 1), SendActivation(0, 0, 1)
    with pytest.raises(ScheduleError, match="needs Forward\\(microbatch=1"):
        check_schedule(crossed)  # sends micro-batch 1 before computing it
    late_recv = [list(good[0]), [op for op in good[1] if op != RecvActivation(1, 0, 0)]]
    late_recv[1].append(RecvActivation(1, 0, 0))
    with pytest.raises(ScheduleError, match="stage 1, instruction .* needs RecvActivation\\(microbatch=1"):
        check_schedule(late_recv)
    with pytest.raises(ScheduleError, match="instruction 1: 'x' is not a pipeline instruction"):
        check_schedule([[Forward(0, 0), "x"]])
    with pytest.raises(ScheduleError, match="micro-batch and chunk must be non-negative integers"):
        check_schedule([[Forward(-1, 0), Backward(-1, 0)]])
    wrong_peer = [list(good[0]), [RecvActivation(0, 0, 1) if op == RecvActivation(0, 0, 0) else op for op in good[1]]]
    with pytest.raises(ScheduleError, match="wrong peer 1"):
        check_schedule(wrong_peer)
    unmatched = [list(good[0]), [op for op in good[1] if op != SendGrad(1, 0, 0)]]
    with pytest.raises(ScheduleError, match="stage 0 instruction .* RecvGrad\\(microbatch=1.* has no matching send on stage 1"):
        check_schedule(unmatched)


def test_simulate_rejects_bad_times():
    with pytest.raises(ScheduleError, match="forward_time must be a positive number"):
        simulate(one_f_one_b(2, 2), forward_time=0)
    with pytest.raises(ScheduleError, match="comm_time must be a non-negative number"):
        simulate(one_f_one_b(2, 2), comm_time=-1)


def test_timeline_json_round_trip_and_errors(tmp_path):
    timeline = simulate(build_schedule("interleaved", 2, 4, 2), name="interleaved")
    path = tmp_path / "t.json"
    timeline.save(path)
    again = Timeline.load(path)
    assert again == timeline and again.bubble_fraction == timeline.bubble_fraction
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"num_stages": 2, "boxes": []}))
    with pytest.raises(ValueError, match="broken.json: not a pipeline timeline .*num_microbatches"):
        Timeline.load(broken)
    with pytest.raises(ValueError, match="box 0 is on stage 3"):
        Timeline(2, 1, boxes=[Box(3, "forward", 0, 0, 0.0, 1.0)])


def test_measured_timeline_bubble_and_picture(tmp_path, capsys):
    # Two stages, one micro-batch, real-looking times (seconds) with a comm box in between.
    boxes = [Box(0, "forward", 0, 0, 10.0, 11.0), Box(0, "comm", 0, 0, 11.0, 11.5),
             Box(1, "forward", 0, 0, 11.5, 12.5), Box(1, "backward", 0, 0, 12.5, 14.5),
             Box(1, "comm", 0, 0, 14.5, 15.0), Box(0, "backward", 0, 0, 15.0, 17.0)]
    measured = Timeline(2, 1, schedule="1f1b", source="measured", boxes=boxes)
    assert measured.makespan == 7.0
    assert measured.bubble_fraction == pytest.approx((2 * 7.0 - 6.0) / 6.0)
    out = draw_timeline(measured, tmp_path / "measured.png", "measured step")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The command draws a recorded timeline and reports its bubble beside the theory.
    measured.save(tmp_path / "measured.json")
    assert main(["pipeline-diagram", "--timeline", str(tmp_path / "measured.json"), "--out",
                 str(tmp_path / "again.png"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"] == "measured" and report["makespan"] == 7.0
    assert report["theoretical_bubble"] == 1.0 and (tmp_path / "again.png").stat().st_size > 1000


def test_cli_writes_png_and_reports_numbers(tmp_path, capsys):
    out, saved = tmp_path / "diagram.png", tmp_path / "timeline.json"
    code = main(["pipeline-diagram", "--pp", "4", "--micro-batches", "8", "--schedule", "interleaved",
                 "--virtual-stages", "2", "--out", str(out), "--save-timeline", str(saved), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["theoretical_bubble"] == pytest.approx(3 / 16)
    assert report["bubble_fraction"] == pytest.approx(3 / 16)
    assert report["makespan"] == pytest.approx(28.5)  # 8 * 3 of work + (pp - 1) * 3 / v
    assert report["peak_inflight_activations"] == [11, 9, 7, 5]
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"
    assert Timeline.load(saved).bubble_fraction == pytest.approx(3 / 16)
    assert main(["pipeline-diagram", "--pp", "4", "--micro-batches", "6", "--schedule", "interleaved",
                 "--virtual-stages", "2", "--out", str(tmp_path / "x.png")]) == 2
    assert "multiple of pp" in capsys.readouterr().out


def test_cli_draws_the_list_each_contract_runs(tmp_path, capsys):
    # Overlapped 1F1B runs one extra warm-up forward on every stage but the last (its slack);
    # batched runs plain 1F1B. With free messages both reach (p-1)/m.
    peaks = {}
    for messages in ("overlapped", "batched"):
        assert main(["pipeline-diagram", "--pp", "4", "--micro-batches", "8", "--messages", messages,
                     "--out", str(tmp_path / f"{messages}.png"), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["bubble_fraction"] == pytest.approx(3 / 8)
        peaks[messages] = report["peak_inflight_activations"]
    assert peaks == {"overlapped": [5, 4, 3, 1], "batched": [4, 3, 2, 1]}


def test_recorder_measures_boxes_against_the_step_origin():
    ticks = iter([100.0, 100.5, 101.5, 102.0, 104.0])
    recorder = TimelineRecorder(stage=1, clock=lambda: next(ticks))
    with pytest.raises(RuntimeError, match="before start"):
        with recorder.record("forward", 0, 0):
            pass
    recorder.start()
    with recorder.record("forward", 0, 0):
        pass
    with recorder.record("backward", 0, 0):
        pass
    assert recorder.boxes == [Box(1, "forward", 0, 0, 0.5, 1.5), Box(1, "backward", 0, 0, 2.0, 4.0)]
    timeline = Timeline(2, 1, source="measured", boxes=[Box(0, "forward", 0, 0, 0.0, 0.5)] + recorder.boxes)
    assert timeline.makespan == 4.0


def test_recorder_stop_returns_the_step_and_ends_recording():
    ticks = iter([10.0, 11.0, 12.0, 20.0, 20.5, 21.0])
    recorder = TimelineRecorder(stage=0, clock=lambda: next(ticks))
    assert not recorder.recording
    recorder.start()
    assert recorder.recording
    with recorder.record("forward", 3, 1):
        pass
    assert recorder.stop() == [Box(0, "forward", 3, 1, 1.0, 2.0)]
    assert not recorder.recording
    with pytest.raises(RuntimeError, match="before start"):
        with recorder.record("forward", 4, 1):
            pass
    recorder.start()  # a new step: new origin, no boxes of the last one
    with recorder.record("backward", 0, 0):
        pass
    assert recorder.stop() == [Box(0, "backward", 0, 0, 0.5, 1.0)]


def test_simulate_replays_given_box_durations():
    # 1F1B, pp=2, m=2; stage 1's forward of micro-batch 0 takes 4 instead of 1: everything after it
    # on stage 1 shifts by 3, and stage 0's backward of micro-batch 0 waits for its gradient.
    uniform = simulate(one_f_one_b(2, 2))
    slow = simulate(one_f_one_b(2, 2), durations={(1, "forward", 0, 0): 4.0})
    box = {(b.stage, b.kind, b.microbatch): b for b in slow.compute_boxes}
    assert box[(1, "forward", 0)].end - box[(1, "forward", 0)].start == 4.0
    assert box[(0, "backward", 0)].start == box[(1, "backward", 0)].end == 7.0
    assert slow.makespan == uniform.makespan + 3.0
