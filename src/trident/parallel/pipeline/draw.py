"""Draws a pipeline Timeline (simulated or measured) as a PNG: the only module here that needs matplotlib."""
from __future__ import annotations

from pathlib import Path

from trident.parallel.pipeline.timeline import Timeline
from trident.text.storage import location, make_folder, open_write

# Colour per kind; chunk c is drawn lighter as c grows so interleaved chunks are told apart.
_BASE_RGB = {"forward": (0.16, 0.40, 0.75), "backward": (0.90, 0.45, 0.10), "weight": (0.10, 0.55, 0.55),
             "comm": (0.55, 0.55, 0.55),
             "send": (0.50, 0.20, 0.60), "recv": (0.15, 0.60, 0.30),
             "reduce": (0.75, 0.15, 0.15)}
# (height, offset of the bottom from the row centre): compute fills the row, a blocked wait is a
# bar in its middle, transfers in flight are thin lines above (send) and below (recv) the compute.
_LANE = {"forward": (0.8, -0.4), "backward": (0.8, -0.4), "weight": (0.8, -0.4), "comm": (0.2, -0.1),
         "send": (0.07, 0.41), "recv": (0.07, -0.48), "reduce": (0.07, -0.56)}


def _shade(kind: str, chunk: int, virtual_stages: int) -> tuple[float, float, float]:
    r, g, b = _BASE_RGB[kind]
    mix = 0.55 * chunk / max(1, virtual_stages - 1) if virtual_stages > 1 else 0.0
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def draw_timeline(timeline: Timeline, path: str | Path, title: str | None = None) -> Path:
    """Draw `timeline` as a PNG at `path`: one row per stage (stage 0 on top), forward and backward
    boxes coloured and labelled with their micro-batch, chunks shaded, waits as grey bars, transfers
    in flight as thin lines above (send) and below (recv) the row."""
    import matplotlib
    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle

    if not timeline.boxes:
        raise ValueError("cannot draw an empty timeline")
    origin = min(b.start for b in timeline.boxes)
    span = max(b.end for b in timeline.boxes) - origin or 1.0  # DP reductions may end after the pipeline
    width = min(40.0, max(8.0, 0.35 * len(timeline.compute_boxes) / timeline.num_stages + 4))
    fig, ax = plt.subplots(figsize=(width, 0.6 * timeline.num_stages + 1.9))
    rectangles, colours = [], []
    for box in timeline.boxes:
        row = timeline.num_stages - 1 - box.stage
        height, offset = _LANE[box.kind]
        rectangles.append(Rectangle((box.start - origin, row + offset), box.end - box.start, height))
        colours.append(_shade(box.kind, box.chunk, timeline.virtual_stages))
        # Label only compute boxes wide enough to hold the number legibly.
        if box.kind in ("forward", "backward", "weight") and (box.end - box.start) / span * width > 0.18:
            ax.text(box.start - origin + (box.end - box.start) / 2, row, str(box.microbatch),
                    ha="center", va="center", fontsize=7, color="white")
    # One collection for all boxes: per-box artists make large timelines slow to draw; thin
    # transfer lines get no white edge, which would hide them.
    edges = ["none" if box.kind in ("send", "recv") else "white" for box in timeline.boxes]
    ax.add_collection(PatchCollection(rectangles, facecolors=colours, edgecolors=edges, linewidths=0.6))
    ax.set_yticks(range(timeline.num_stages))
    ax.set_yticklabels([f"stage {s}" for s in reversed(range(timeline.num_stages))])
    ax.set_xlim(0, span)
    ax.set_ylim(-0.6, timeline.num_stages - 0.4)
    ax.set_xlabel("time (simulated units)" if timeline.source == "simulated" else "time (s)")
    legend = [Patch(color=_shade("forward", 0, 1), label="forward"),
              Patch(color=_shade("backward", 0, 1), label="backward")]
    kinds = {box.kind for box in timeline.boxes}
    legend += [Patch(color=_BASE_RGB[kind], label=label) for kind, label in
               (("weight", "weight gradients"), ("comm", "waiting for a transfer"), ("send", "send in flight"),
                ("recv", "receive in flight"),
                ("reduce", "DP reduction (bucket)"))
               if kind in kinds]
    if timeline.virtual_stages > 1:
        legend.append(Patch(color="white", label="lighter = later chunk"))
    # Legend below the axes so it hides neither a box nor the title.
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, ncol=len(legend),
              frameon=False)
    heading = title or f"{timeline.schedule or 'pipeline'} ({timeline.source})"
    ax.set_title(f"{heading}: pp={timeline.num_stages}, m={timeline.num_microbatches}, "
                 f"v={timeline.virtual_stages}, bubble {timeline.bubble_fraction:.3f}", fontsize=9, loc="left")
    fig.tight_layout()
    path = location(path)
    make_folder(path.parent)
    with open_write(path) as handle:  # a local file or an object (matplotlib writes to any binary handle)
        fig.savefig(handle, dpi=120, format=path.suffix[1:] or "png")
    plt.close(fig)
    return path
