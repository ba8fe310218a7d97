"""The timeline of one pipeline step, simulated or measured, its JSON form and its picture.

A Timeline is a list of boxes (stage, kind, micro-batch, chunk, start, end). `pipeline_sim.simulate`
produces one from a schedule; the trainer records one from real steps (start/end of every
instruction, on clocks aligned across ranks, e.g. seconds since a barrier). Both are drawn and
measured the same way, so measured and simulated bubbles are comparable.

Bubble fraction (the measured counterpart of (pp - 1) / (m * v)): the idle time summed over
stages, divided by the compute time summed over stages, where a stage is idle whenever it is
not computing between the first start and the last end of the step. Communication boxes count
as idle. For 1F1B with equal work per stage and free communication this is exactly (pp-1)/m.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

KINDS = ("forward", "backward", "comm")


@dataclass(frozen=True)
class Box:
    """One interval of work on one stage. kind: forward | backward | comm (microbatch/chunk of a
    comm box name its first transfer)."""
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
        return [b for b in self.boxes if b.kind != "comm"]

    @property
    def makespan(self) -> float:
        """Time from the first start to the last end, over all stages."""
        if not self.boxes:
            return 0.0
        return max(b.end for b in self.boxes) - min(b.start for b in self.boxes)

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
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Timeline":
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: invalid JSON ({err})") from err
        return cls.from_json(data, where=str(path))


class TimelineRecorder:
    """Measures one rank's boxes of a real step. Call `start()` right after a barrier that all
    pipeline ranks pass together (it is the shared time origin), then wrap each instruction in
    `record(kind, microbatch, chunk)`. Gather every rank's `boxes` and build a Timeline from them."""

    def __init__(self, stage: int, clock: Callable[[], float] = time.perf_counter):
        self.stage, self.clock = stage, clock
        self.origin: float | None = None
        self.boxes: list[Box] = []

    def start(self) -> None:
        self.origin, self.boxes = self.clock(), []

    @contextmanager
    def record(self, kind: str, microbatch: int, chunk: int) -> Iterator[None]:
        if self.origin is None:
            raise RuntimeError("TimelineRecorder.record() before start(): no time origin for this step")
        if kind not in KINDS:
            raise ValueError(f"unknown timeline box kind {kind!r}; expected one of {', '.join(KINDS)}")
        begin = self.clock() - self.origin
        try:
            yield
        finally:
            self.boxes.append(Box(self.stage, kind, microbatch, chunk, begin, self.clock() - self.origin))


# Colour per kind; chunk c is drawn lighter as c grows so interleaved chunks are told apart.
_BASE_RGB = {"forward": (0.16, 0.40, 0.75), "backward": (0.90, 0.45, 0.10), "comm": (0.55, 0.55, 0.55)}


def _shade(kind: str, chunk: int, virtual_stages: int) -> tuple[float, float, float]:
    r, g, b = _BASE_RGB[kind]
    mix = 0.55 * chunk / max(1, virtual_stages - 1) if virtual_stages > 1 else 0.0
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def draw_timeline(timeline: Timeline, path: str | Path, title: str | None = None) -> Path:
    """Draw `timeline` as a PNG at `path`: one row per stage (stage 0 on top), forward and backward
    boxes coloured and labelled with their micro-batch, chunks shaded, comm boxes as thin bars."""
    import matplotlib
    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle

    if not timeline.boxes:
        raise ValueError("cannot draw an empty timeline")
    origin = min(b.start for b in timeline.boxes)
    span = timeline.makespan or 1.0
    width = min(40.0, max(8.0, 0.35 * len(timeline.compute_boxes) / timeline.num_stages + 4))
    fig, ax = plt.subplots(figsize=(width, 0.6 * timeline.num_stages + 1.6))
    rectangles, colours = [], []
    for box in timeline.boxes:
        row = timeline.num_stages - 1 - box.stage
        height, bottom = (0.2, row - 0.1) if box.kind == "comm" else (0.8, row - 0.4)
        rectangles.append(Rectangle((box.start - origin, bottom), box.end - box.start, height))
        colours.append(_shade(box.kind, box.chunk, timeline.virtual_stages))
        # Label only boxes wide enough to hold the number legibly.
        if box.kind != "comm" and (box.end - box.start) / span * width > 0.18:
            ax.text(box.start - origin + (box.end - box.start) / 2, row, str(box.microbatch),
                    ha="center", va="center", fontsize=7, color="white")
    # One collection for all boxes: per-box artists make large timelines slow to draw.
    ax.add_collection(PatchCollection(rectangles, facecolors=colours, edgecolors="white", linewidths=0.6))
    ax.set_yticks(range(timeline.num_stages))
    ax.set_yticklabels([f"stage {s}" for s in reversed(range(timeline.num_stages))])
    ax.set_xlim(0, span)
    ax.set_ylim(-0.6, timeline.num_stages - 0.4)
    ax.set_xlabel("time (simulated units)" if timeline.source == "simulated" else "time (s)")
    legend = [Patch(color=_shade("forward", 0, 1), label="forward"),
              Patch(color=_shade("backward", 0, 1), label="backward")]
    if timeline.virtual_stages > 1:
        legend.append(Patch(color="white", label="lighter = later chunk"))
    # Legend above the axes so it never hides a box.
    ax.legend(handles=legend, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, ncol=len(legend),
              frameon=False)
    heading = title or f"{timeline.schedule or 'pipeline'} ({timeline.source})"
    ax.set_title(f"{heading}: pp={timeline.num_stages}, m={timeline.num_microbatches}, "
                 f"v={timeline.virtual_stages}, bubble {timeline.bubble_fraction:.3f}", fontsize=9, loc="left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
