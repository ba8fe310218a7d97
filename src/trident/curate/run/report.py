"""report.md and its PNG charts (document funnel, quality-score histogram, duplicate-cluster sizes)
from a pipeline run's stats dict (the content of stats.json)."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

from trident.curate.read.inputs import skipped_summary
from trident.text.damage import LOST_PREFIX, damage_summary
from trident.text.storage import location, open_write


def histogram(stats: dict, name: str) -> dict[str, int]:
    """Bins of the `hist:<name>:<bin>` counters summed over all stages, by bin label."""
    prefix = f"hist:{name}:"
    bins: dict[str, int] = {}
    for stage in stats["stages"]:
        for key, value in stage["counters"].items():
            if key.startswith(prefix):
                label = key[len(prefix):]
                bins[label] = bins.get(label, 0) + value
    return dict(sorted(bins.items(), key=lambda kv: _bin_order(kv[0])))


def _bin_order(label: str) -> tuple:
    """Sort key: numeric bins by value, an open-ended "N+" right after N's peers, other labels last."""
    try:
        return (0, float(label.removesuffix("+")), label.endswith("+"), "")
    except ValueError:
        return (1, 0.0, False, label)


# Charts are drawn with Pillow, not matplotlib: importing matplotlib costs a second of CPU, more than
# a fuzzy-dedup run of thousands of documents; these are bar charts with labels.
_SIZE, _MARGIN, _BAR, _INK, _GRID = (770, 400), 12, ("#4c72b0", "#55a868"), "#222222", "#dddddd"


def _canvas(title: str):
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", _SIZE, "white")
    draw = ImageDraw.Draw(image)
    fonts = ImageFont.load_default(size=13), ImageFont.load_default(size=16)
    draw.text((_SIZE[0] // 2, _MARGIN), title, fill=_INK, font=fonts[1], anchor="mt")
    return image, draw, fonts[0]


def _save(image, path: Path) -> None:
    with open_write(path) as handle:  # a local file or an object
        handle.write(png_bytes(image))


def png_bytes(image) -> bytes:
    """The PNG file of an RGB Pillow image (8 bits a channel, rows unfiltered, zlib level 1: a chart of
    flat colours is 7 KB, 2 ms). Written here: Pillow's writer (filtering and level 6, 9 ms a chart)
    first imports its BMP, GIF, JPEG and PPM plugins too, ~15 ms more of a run's end."""
    width, height = image.size
    raw, stride = image.tobytes(), 3 * width
    rows = b"".join(b"\0" + raw[y * stride : (y + 1) * stride] for y in range(height))  # filter 0 per row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, deflate, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b"")


def plot_funnel(stats: dict, path: Path) -> None:
    """Horizontal bars: documents left after each stage."""
    names = [s["name"] for s in stats["stages"]]
    kept = [s["counters"].get("out", 0) for s in stats["stages"]]
    image, draw, font = _canvas("curation funnel")
    label_width = max([draw.textlength(n, font=font) for n in names] + [0]) + 2 * _MARGIN
    left, top, right = int(label_width), 40, _SIZE[0] - 90
    row = (_SIZE[1] - top - 30) / max(1, len(names))
    for y, (name, value) in enumerate(zip(names, kept)):
        y0 = top + y * row
        width = (right - left) * value / max(1, max(kept))
        draw.rectangle([left, y0 + row * 0.15, left + width, y0 + row * 0.85], fill=_BAR[0])
        draw.text((left - _MARGIN // 2, y0 + row / 2), name, fill=_INK, font=font, anchor="rm")
        draw.text((left + width + 4, y0 + row / 2), str(value), fill=_INK, font=font, anchor="lm")
    draw.text(((left + right) // 2, _SIZE[1] - _MARGIN), "documents out", fill=_INK, font=font, anchor="mb")
    _save(image, path)


def plot_bins(bins: dict[str, int], path: Path, title: str, xlabel: str) -> None:
    """Vertical bars: the count of each bin, labelled."""
    image, draw, font = _canvas(title)
    left, top, right, bottom = 70, 40, _SIZE[0] - _MARGIN, _SIZE[1] - 60
    peak = max(list(bins.values()) + [1])
    for tick in range(5):  # grid lines at quarters of the largest count
        y = bottom - (bottom - top) * tick / 4
        draw.line([left, y, right, y], fill=_GRID)
        draw.text((left - 6, y), f"{peak * tick / 4:,.0f}", fill=_INK, font=font, anchor="rm")
    step = (right - left) / max(1, len(bins))
    for x, (label, count) in enumerate(bins.items()):
        x0 = left + x * step
        draw.rectangle([x0 + step * 0.1, bottom - (bottom - top) * count / peak, x0 + step * 0.9, bottom],
                       fill=_BAR[1])
        draw.text((x0 + step / 2, bottom + 4), label, fill=_INK, font=font, anchor="mt")
    draw.text(((left + right) // 2, _SIZE[1] - _MARGIN), xlabel, fill=_INK, font=font, anchor="mb")
    draw.text((left - 6, top - 14), "count", fill=_INK, font=font, anchor="rm")
    _save(image, path)


def _stage_table(stats: dict) -> list[str]:
    rows = ["| stage | kind | in | out | dropped (by reason) | bytes in | bytes out | seconds |",
            "|---|---|---:|---:|---|---:|---:|---:|"]
    for stage in stats["stages"]:
        counters = stage["counters"]
        drops = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in counters.items() if k.startswith("dropped:")) or "-"
        rows.append(f"| {stage['name']} | {stage['kind']} | {counters.get('in', 0)} | {counters.get('out', 0)} | "
                    f"{drops} | {counters.get('bytes_in', '')} | {counters.get('bytes_out', '')} | {stage.get('seconds', '')} |")
    return rows


def _other_counters(stats: dict) -> list[str]:
    lines = []
    for stage in stats["stages"]:
        extra = {k: v for k, v in stage["counters"].items()
                 if k not in ("in", "out", "bytes_in", "bytes_out") and v
                 and not k.startswith(("dropped:", "hist:", "duplicates_of_language:", LOST_PREFIX))}
        if extra:
            lines.append(f"- **{stage['name']}**: " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    return lines


def _duplicates_by_language(stats: dict) -> list[str]:
    """One line per dedup stage: its dropped copies by the language of the copy each was dropped
    for (counters duplicates_of_language:<code>), most first."""
    lines = []
    for stage in stats["stages"]:
        found = {k.split(":", 1)[1]: v for k, v in stage["counters"].items() if k.startswith("duplicates_of_language:")}
        if found:
            counts = ", ".join(f"{code} {n}" for code, n in sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))
            lines.append(f"- **{stage['name']}**: {counts}")
    return lines


def _cell(value, limit: int = 160) -> str:
    """Text safe in one Markdown table cell: a damaged record's bytes (control characters, newlines,
    pipes) shown escaped, and cut at `limit` characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value)).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit] + "..."


def write_report(stats: dict, out_dir: Path) -> Path:
    """Write OUT/report.md plus funnel.png (and quality_scores.png / cluster_sizes.png when the run
    produced those histograms); returns the report path."""
    out_dir = location(out_dir)
    plot_funnel(stats, out_dir / "funnel.png")
    first_in = stats["stages"][0]["counters"].get("in", 0) if stats["stages"] else 0
    lines = ["# Curation report", "",
             f"{first_in} input records -> {stats['output']['documents']} documents in "
             f"{len(stats['output']['shards'])} shard(s); executor {stats['executor']} with {stats['workers']} "
             f"worker(s), {stats['elapsed_s']} s.", "",
             f"Accounting (in = out + dropped for every stage, chained): "
             f"**{'OK' if stats['accounting']['ok'] else 'FAILED'}**"]
    lines += [f"- {p}" for p in stats["accounting"]["problems"]]
    if "drops" in stats:
        lines += ["", f"Drop log: {stats['drops']['records']} dropped documents in `drops/` ({stats['drops']['files']} "
                      f"files; stage, reason, score each); `trident curate why OUT URL|ID` finds one."]
    if stats.get("skipped_files"):  # files of the input folders that trident does not read
        lines += ["", f"Skipped input files: {skipped_summary(stats['skipped_files'])}"]
    lines += ["", "![funnel](funnel.png)", ""] + _stage_table(stats)
    disabled = [s["stage"] for s in stats["config"]["stages"] if not s.get("enabled", True)]
    if disabled:
        lines += ["", "Disabled in this config: " + ", ".join(disabled)]
    damaged = damage_summary(stats["stages"][0]["counters"]) if stats["stages"] else []
    if damaged:
        lines += ["", "## Damaged input files", ""] + [f"- {_cell(line, 300)}" for line in damaged]
    by_language = _duplicates_by_language(stats)
    if by_language:
        lines += ["", "## Duplicates by the language of the copy kept", ""] + by_language
    other = _other_counters(stats)
    if other:
        lines += ["", "## Other counters", ""] + other
    for name, title, xlabel in (("quality_score", "quality scores", "score bin (x 0.05)"),
                                ("cluster_size", "duplicate-cluster sizes", "documents in cluster")):
        bins = histogram(stats, name)
        if bins:
            plot_bins(bins, out_dir / f"{name}s.png", title, xlabel)
            lines += ["", f"## {title.capitalize()}", "", f"![{name}]({name}s.png)"]
    if stats["errors"]:
        lines += ["", f"## Bad input records (first {len(stats['errors'])})", "",
                  "| file | position | reason | detail |", "|---|---|---|---|"]
        lines += [f"| {_cell(e['file'])} | {_cell(e['position'])} | {_cell(e['reason'])} | {_cell(e['detail'])} |"
                  for e in stats["errors"][:50]]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
