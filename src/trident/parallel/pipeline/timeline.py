"""The timeline of one pipeline step, simulated or measured, and its JSON form.

A Timeline is a list of boxes (stage, kind, micro-batch, chunk, start, end). `simulate.simulate`
produces one from a schedule; a TimelineRecorder handed to the executor measures one rank's boxes of
a real step (every compute instruction, every transfer from its post to the end of its wait, every
wait that blocked; seconds since a barrier all stages pass), on the device's clock: CUDA events on
CUDA (the host's clock would time when kernels are queued), perf_counter on CPU. Both are measured
(and drawn, by `draw.draw_timeline`) the same way, so measured and simulated bubbles are comparable.

Bubble fraction (the measured counterpart of (pp - 1) / (m * v)): the idle time summed over
stages, divided by the compute time summed over stages, where a stage is idle whenever it is
not computing between the first start and the last end of the step. Waiting for a transfer
(`comm`) counts as idle; transfers in flight behind compute (`send`, `recv`) cost nothing. For
1F1B with equal work per stage and free communication this is exactly (pp-1)/m.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from trident.parallel.device_clock import CudaClock, HostClock
from trident.text.storage import location

KINDS = ("forward", "backward", "weight", "comm", "send", "recv", "reduce")
COMPUTE_KINDS = ("forward", "backward", "weight")


@dataclass(frozen=True)
class Box:
    """One interval on one stage. kind: forward | backward | weight (compute; weight: a zero-bubble
    schedule's deferred weight gradients); comm (the stage blocked waiting
    for the transfer of this microbatch/chunk); send | recv (a transfer, from its post to its
    completion as this stage saw it: in flight, possibly behind compute); reduce (one DP gradient
    bucket, from the launch of its reduction to the end of its wait; microbatch holds the bucket
    index, chunk 0)."""
    stage: int
    kind: str
    microbatch: int
    chunk: int
    start: float
    end: float


@dataclass
class Timeline:
    """Boxes of one pipeline step on `num_stages` stages; source says simulated or measured."""
    num_stages: int
    num_microbatches: int
    virtual_stages: int = 1
    schedule: str = ""
    source: str = "simulated"
    boxes: list[Box] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i, box in enumerate(self.boxes):
            if box.kind not in KINDS:
                raise ValueError(f"timeline box {i} has kind {box.kind!r}; expected one of {', '.join(KINDS)}")
            if not 0 <= box.stage < self.num_stages:
                raise ValueError(f"timeline box {i} is on stage {box.stage}, outside 0..{self.num_stages - 1}")
            if box.end < box.start:
                raise ValueError(f"timeline box {i} ends ({box.end}) before it starts ({box.start})")

    @property
    def compute_boxes(self) -> list[Box]:
        return [b for b in self.boxes if b.kind in COMPUTE_KINDS]

    @property
    def makespan(self) -> float:
        """Time from the first start to the last end of the pipeline's boxes, over all stages (DP
        reductions finishing after the pipeline drained are not part of it)."""
        boxes = [b for b in self.boxes if b.kind != "reduce"]
        if not boxes:
            return 0.0
        return max(b.end for b in boxes) - min(b.start for b in boxes)

    def wait_time(self, stage: int) -> float:
        """Time `stage` spent blocked on transfers (its comm boxes)."""
        return sum(b.end - b.start for b in self.boxes if b.kind == "comm" and b.stage == stage)

    def compute_time(self, stage: int) -> float:
        return sum(b.end - b.start for b in self.compute_boxes if b.stage == stage)

    @property
    def bubble_fraction(self) -> float:
        """Idle stage-time over compute stage-time (see the module docstring)."""
        compute = sum(self.compute_time(s) for s in range(self.num_stages))
        if compute <= 0:
            raise ValueError("timeline has no compute time; the bubble fraction is undefined")
        return (self.num_stages * self.makespan - compute) / compute

    def to_json(self) -> dict:
        data = asdict(self)
        data["boxes"] = [asdict(b) for b in self.boxes]
        return data

    @classmethod
    def from_json(cls, data: dict, where: str = "timeline") -> "Timeline":
        """Inverse of to_json; errors name `where` (e.g. the file) and the missing key."""
        try:
            boxes = [Box(int(b["stage"]), str(b["kind"]), int(b["microbatch"]), int(b["chunk"]),
                         float(b["start"]), float(b["end"])) for b in data["boxes"]]
            return cls(num_stages=int(data["num_stages"]), num_microbatches=int(data["num_microbatches"]),
                       virtual_stages=int(data.get("virtual_stages", 1)), schedule=str(data.get("schedule", "")),
                       source=str(data.get("source", "measured")), boxes=boxes)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: not a pipeline timeline ({type(err).__name__}: {err})") from err

    def save(self, path: str | Path) -> None:
        location(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Timeline":
        try:
            data = json.loads(location(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: invalid JSON ({err})") from err
        return cls.from_json(data, where=str(path))


class TimelineRecorder:
    """Measures one rank's boxes of a real step. `start()` right after a barrier that all pipeline
    ranks pass together (it is the shared time origin), then wrap each instruction in
    `record(kind, microbatch, chunk)`; `stop()` ends the step and returns its boxes. Gather every
    rank's boxes and build a Timeline from them.

    `clock` (parallel/device_clock.py: clock_for(device)) times the work where it runs: CUDA events on
    CUDA, read once when the step stops; the host clock on CPU. A plain function is taken as a host
    clock's reading."""

    def __init__(self, stage: int, clock: HostClock | CudaClock | Callable[[], float] | None = None):
        self.stage = stage
        self.clock = HostClock(clock) if callable(clock) else (clock or HostClock())
        self.marked: list[tuple] | None = None  # (kind, microbatch, chunk, start mark, end mark) this step

    @property
    def recording(self) -> bool:
        """True between start() and stop()."""
        return self.marked is not None

    def start(self) -> None:
        self.clock.start()
        self.marked = []

    @property
    def boxes(self) -> list[Box]:
        """This step's boxes so far, times in seconds since start() (on CUDA: waits for the device)."""
        self.clock.settle()
        seconds = self.clock.seconds
        return [Box(self.stage, kind, mb, chunk, seconds(a), seconds(b)) for kind, mb, chunk, a, b in self.marked or []]

    def stop(self) -> list[Box]:
        """End this step's recording; its boxes, times in seconds since start()."""
        boxes = self.boxes
        self.marked = None
        return boxes

    def now(self):
        """A mark of this moment on the recorder's clock (an error before start()), for add()."""
        if self.marked is None:
            raise RuntimeError("TimelineRecorder used before start(): no time origin for this step")
        return self.clock.mark()

    def add(self, kind: str, microbatch: int, chunk: int, start, end) -> None:
        """Add a box between two marks taken elsewhere (now()), e.g. a transfer's post and completion."""
        if kind not in KINDS:
            raise ValueError(f"unknown timeline box kind {kind!r}; expected one of {', '.join(KINDS)}")
        self.marked.append((kind, microbatch, chunk, start, end))

    @contextmanager
    def record(self, kind: str, microbatch: int, chunk: int) -> Iterator[None]:
        """Time the body as one box."""
        if kind not in KINDS:
            raise ValueError(f"unknown timeline box kind {kind!r}; expected one of {', '.join(KINDS)}")
        begin = self.now()
        try:
            yield
        finally:
            self.add(kind, microbatch, chunk, begin, self.now())
