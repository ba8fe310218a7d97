"""`trident pipeline-diagram`: simulate a pipeline schedule (or load a measured timeline) and draw it."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from trident.config.pipeline_schedules import DEFAULT_SCHEDULE, INTERLEAVED
from trident.parallel.pipeline.draw import draw_timeline
from trident.parallel.pipeline.overlap import CONTRACTS, schedule_for
from trident.parallel.pipeline.registry import SCHEDULES
from trident.parallel.pipeline.schedules import ScheduleError, peak_inflight
from trident.parallel.pipeline.simulate import simulate
from trident.parallel.pipeline.timeline import Timeline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pp", type=int, default=4, help="pipeline stages (default 4)")
    parser.add_argument("--micro-batches", type=int, default=8, help="micro-batches per step (default 8)")
    parser.add_argument("--schedule", choices=tuple(SCHEDULES), default=DEFAULT_SCHEDULE,
                        help=f"pipeline schedule (default {DEFAULT_SCHEDULE})")
    parser.add_argument("--virtual-stages", type=int, default=1,
                        help=f"model chunks per stage; > 1 needs --schedule {INTERLEAVED.name} (default 1)")
    parser.add_argument("--forward-time", type=float, default=1.0,
                        help="time of one micro-batch forward through a whole stage (default 1)")
    parser.add_argument("--backward-time", type=float, default=2.0,
                        help="time of one micro-batch backward through a whole stage (default 2)")
    parser.add_argument("--weight-fraction", type=float, default=0.5,
                        help="share of the backward a zero-bubble schedule defers to BackwardWeight (default 0.5)")
    parser.add_argument("--comm-time", type=float, default=0.0, help="time of one transfer (default 0)")
    parser.add_argument("--messages", choices=CONTRACTS, default="overlapped",
                        help="overlapped (gloo's default) or batched (NCCL's) pipeline messages (default overlapped)")
    parser.add_argument("--timeline", metavar="JSON",
                        help="draw this recorded timeline (e.g. measured by the trainer) instead of simulating")
    parser.add_argument("--save-timeline", metavar="JSON", help="also write the timeline as JSON here")
    parser.add_argument("--out", default="pipeline.png", help="PNG to write (default pipeline.png)")
    parser.add_argument("--title", help="title of the picture")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")


def run(args: argparse.Namespace) -> int:
    try:
        if args.timeline:
            timeline = Timeline.load(args.timeline)
            peaks = None
        else:
            schedule = schedule_for(args.schedule, args.pp, args.micro_batches, args.virtual_stages, args.messages)
            timeline = simulate(schedule, args.forward_time, args.backward_time, args.comm_time, name=args.schedule,
                                contract=args.messages, weight_fraction=args.weight_fraction)
            peaks = peak_inflight(schedule)
    except (ScheduleError, ValueError, OSError) as err:
        print(f"error: {err}")
        return 2
    # a recorded timeline may name no schedule: its theory is then 1F1B's (pp - 1) / (m v)
    theory = SCHEDULES.get(timeline.schedule, SCHEDULES[DEFAULT_SCHEDULE])
    if Path(args.out).is_dir():  # a folder: the picture goes into it
        args.out = str(Path(args.out) / "pipeline.png")
    draw_timeline(timeline, args.out, args.title)
    if args.save_timeline:
        timeline.save(args.save_timeline)
    report = {
        "schedule": timeline.schedule, "source": timeline.source, "pp": timeline.num_stages,
        "micro_batches": timeline.num_microbatches, "virtual_stages": timeline.virtual_stages,
        "makespan": timeline.makespan, "bubble_fraction": timeline.bubble_fraction,
        "theoretical_bubble": theory.bubble(timeline.num_stages, timeline.num_microbatches, timeline.virtual_stages),
        "peak_inflight_activations": peaks, "out": str(args.out),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['schedule'] or 'pipeline'} ({report['source']}): pp={report['pp']} "
              f"m={report['micro_batches']} v={report['virtual_stages']}")
        print(f"  makespan            {report['makespan']:.3f}")
        print(f"  bubble (measured)   {report['bubble_fraction']:.4f}")
        print(f"  bubble (theory)     {report['theoretical_bubble']:.4f}  = {theory.bubble_formula}")
        if peaks is not None:
            print(f"  peak activations    {peaks}  (per stage, in (micro-batch, chunk) sets)")
        print(f"  wrote {report['out']}")
    return 0
