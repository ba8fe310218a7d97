"""A table drawn with box characters, as rich's default table looks, for a command's closing summary:
importing rich's console costs ~20 ms, a noticeable share of a curation run of a second."""
from __future__ import annotations

_BOX = "┏━┳┓┃┡╇┩│└─┴┘"
_ASCII = "+=++|+++|+-++"  # where the output's encoding has no box characters (a Windows code page)


def box_table(title: str, headers: list[str], rows: list[list[str]], right: tuple[str, ...] = (),
              encoding: str | None = "utf-8") -> str:
    """The table as text: ``title`` centred above, a heavy header, one line per row; the columns
    named in ``right`` aligned right, the others left; cells as given (no wrapping). Drawn in ASCII
    when ``encoding`` (the output's, e.g. sys.stdout.encoding) cannot write the box characters."""
    try:
        _BOX.encode(encoding or "ascii")
        chars = _BOX
    except (UnicodeEncodeError, LookupError):
        chars = _ASCII
    top_left, heavy, top_cross, top_right, head_bar, mid_left, mid_cross, mid_right, bar, *bottom = chars
    widths = [max([len(h)] + [len(row[k]) for row in rows]) for k, h in enumerate(headers)]

    def line(cells: list[str], edge: str) -> str:
        padded = [c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(cells, widths, headers)]
        return edge + edge.join(f" {c} " for c in padded) + edge

    def rule(left: str, fill: str, cross: str, end: str) -> str:
        return left + cross.join(fill * (w + 2) for w in widths) + end

    lines = [rule(top_left, heavy, top_cross, top_right), line(headers, head_bar),
             rule(mid_left, heavy, mid_cross, mid_right)]
    lines += [line(row, bar) for row in rows] + [rule(bottom[0], bottom[1], bottom[2], bottom[3])]
    return "\n".join([title.center(len(lines[0])).rstrip()] + lines)
