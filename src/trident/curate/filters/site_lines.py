"""Repeated lines across a site's pages: navigation, footers, cookie and version banners.

trident's addition to MT-NLG's recipe (which has no such stage): extraction keeps what a page's
markup does not mark as chrome, so every page of a site may carry the same menu and footer lines.
A line is *template* for a host when it occurs in at least ``min_docs`` distinct pages of that
host and in at least ``min_fraction`` of them; hosts with fewer than ``min_host_docs`` distinct
pages are left alone. A template line is removed only where it stands in the page's template
region: in the run of template lines that starts or ends the page, or in a run of at least
``min_run`` consecutive template lines inside it; a lone template line between content lines
(a subheading "Downloads" equal to a menu item) is content and stays; so does a page's own title
as its first line, and the heading under it (a man page's title and NAME). Pages left without text
are dropped (``dropped:site_boilerplate``, written to the drop log beside the output shard).

Lines are compared case-folded, each run of digits as 0, whitespace collapsed (so "Last updated
2024-03-12" and "Page 3 of 12" are one line per site); blank lines are neither counted nor removed. Pages
are counted once per distinct text, so copies of one page under several URLs (crawl variants
that dedup removes later) do not make its article lines template. The site is the URL's host, lower
case, without "www."; for a local file (a ``file://`` URL or an absolute path) its folder, so the
pages of a documentation tree read from disk are one site per folder; documents without a URL
pass untouched (counted ``no_url``).

With ``shapes`` (the default), navigation lines that carry a title (``Prev Up <chapter> Home Next``)
are found by their shape in a page's first and last lines and removed too (site_shapes).

A map/reduce over files, as dedup (the driver gets counts only):
  1. per shard: (host, line, page) hashes of every page, (host, page, shard), the words of each
     page's edge lines and of a sample of its body, by host partition;
  2. per partition: distinct pages per host and per (host, line); template lines, anchors and
     template shapes sent, as files, to each shard that holds a page of their host;
  3. per shard: rewrite it without the template regions of its pages.
"""
from __future__ import annotations

from collections import Counter
from itertools import groupby
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import xxhash

from trident.curate.dedup.partitions import load_partition, save_partitioned
from trident.curate.document import CurateError
from trident.curate.droplog import DropLog, log_path
from trident.curate.filters.site_shapes import (BODY, EDGES, STRONG, WEAK, anchor_key, find_anchors, find_shapes,
                                                fold, page_records, shape_flags)
from trident.curate.read.shards import LEVEL, output_level, read_shard, write_shard
from trident.curate.stage import Executor, GlobalStage, output_paths, register_stage
from trident.text.storage import load_array, location, make_folder, remove_tree, save_array

_LINES = [("host", "u8"), ("line", "u8"), ("page", "u8")]
_PAGES = [("host", "u8"), ("page", "u8"), ("shard", "u4")]
_TEMPLATE = [("host", "u8"), ("line", "u8")]
DROP_REASON = "site_boilerplate"


def line_key(line: str) -> int:
    """xxh3-64 of a line as compared across pages: case-folded, digit runs -> 0, whitespace collapsed."""
    return line_keys([line])[0]


def line_keys(lines: list[str]) -> list[int]:
    """line_key of each of `lines` (none holding a line break), folded all at once."""
    return folded_lines_and_keys(lines)[1]


def folded_lines_and_keys(lines: list[str]) -> tuple[list[str], list[int]]:
    """(fold of each of `lines`, their line keys), folded in one call (fold maps characters and digit
    runs, which never span a line break)."""
    folded = fold("\n".join(lines)).split("\n") if lines else []
    return folded, [xxhash.xxh3_64_intdigest(" ".join(line.split()).encode("utf-8")) for line in folded]


def site_name(url) -> str | None:
    """A URL's site: its host (lower case, "www." removed), or for a local file (``file://`` URL or
    absolute path) "file:" and its folder; None without a URL or host."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
    except ValueError:  # a malformed URL ("http://[x") names no host
        return None
    if parts is None:
        return None
    if parts.scheme in ("file", "") and parts.path.startswith("/"):
        return "file:" + parts.path.rsplit("/", 1)[0]
    return parts.hostname.removeprefix("www.") if parts.hostname else None


def site_key(url) -> int | None:
    """xxh3-64 of a URL's site (site_name); None without one."""
    site = site_name(url)
    return xxhash.xxh3_64_intdigest(site.encode("utf-8")) if site else None


def template_region(flags: list[int], min_run: int) -> list[bool]:
    """Which lines to remove, given which are template (1 or True: an exact template line; WEAK or
    STRONG: a line of template shape, site_shapes): STRONG lines wherever they stand, runs of
    template lines that touch either end of the page and hold a line that is not WEAK (a page title
    whose one frequent word gives it a shape stays), and runs of at least ``min_run`` exact
    template lines. A page whose first line is of weak shape opens with its own title ("git-add(1)
    Manual Page"): it stays, and the lines under it are inside the page, not at its top edge (a man
    page's `NAME` heading, on every page of the folder, stays with it)."""
    titled = bool(flags) and flags[0] == WEAK
    out: list[bool] = []
    for is_template, run in groupby(flags, key=bool):
        run = list(run)
        edge = (not out and not titled) or len(out) + len(run) == len(flags)
        anchored = any(flag != WEAK for flag in run)  # weak shapes alone are no template region
        out += [is_template and ((edge and anchored) or flag == STRONG) for flag in run]
    at = 0
    for exact, run in groupby(flag == 1 for flag in flags):
        n = len(list(run))
        if exact and n >= min_run:
            out[at:at + n] = [True] * n
        at += n
    if titled:
        out[0] = False
    return out


def strip_template(text: str, template: set[int], min_run: int, keys: list[int] | None = None) -> tuple[str, int]:
    """(``text`` without its template region, lines removed); blank lines that a removal left
    at either end or next to another blank line go too. ``keys``: the line_keys of its non-blank
    lines, when the count step made them already."""
    if not template:
        return text, 0
    lines = text.split("\n")
    filled = [i for i, line in enumerate(lines) if line.strip()]
    shaped = shape_flags([lines[i] for i in filled], template)
    keys = line_keys([lines[i] for i in filled]) if keys is None else keys
    flags = list(map(template.__contains__, keys))  # True: an exact template line (== 1)
    for j, shape in shaped.items():
        flags[j] = shape
    if not any(flags):  # no template line on the page (a third of a documentation site's pages)
        return text, 0
    remove = {i for i, r in zip(filled, template_region(flags, min_run)) if r}
    if not remove:
        return text, 0
    kept: list[str] = []
    gap = False  # a line was removed since the last kept non-blank one
    for i, line in enumerate(lines):
        blank = not line.strip()
        if i in remove or (blank and gap and (not kept or not kept[-1].strip())):
            gap = gap or i in remove
            continue
        kept.append(line)
        gap = gap and blank
    while kept and not kept[-1].strip() and gap:
        kept.pop()
    return "\n".join(kept), len(remove)


def _count_task(job: dict) -> int:
    """Map: (host, line, page) and (host, page, shard) records of one shard, and with shapes the
    EDGES and BODY records of its pages, by host partition; returns the documents seen."""
    pages: list[tuple[int, int, int]] = []
    edges: list[tuple] = []
    body: Counter = Counter()
    page_keys, counts = [], []  # every page's line keys, for the rewrite step (a page without a host: none)
    seen = 0
    for doc in read_shard(location(job["path"])):
        seen += 1
        host = site_key(doc.meta.get("url"))
        counts.append(0)
        if host is None:
            continue
        text_lines = [line for line in doc.text.split("\n") if line.strip()]
        folded, keys = folded_lines_and_keys(text_lines)
        page_keys.append(np.array(keys, dtype=np.uint64))
        counts[-1] = len(keys)
        # a page is its normalised lines in order: copies of one page under other URLs count once
        page = xxhash.xxh3_64_intdigest(page_keys[-1].tobytes())
        pages.append((host, page, job["shard"]))
        if job["shapes"]:
            page_edges, page_body = page_records(host, page, folded)
            edges += page_edges
            body.update((host, word) for word in page_body)
    work, parts, name = location(job["work"]), np.uint64(job["partitions"]), f"s{job['shard']:06d}"
    pages_table = np.array(pages, dtype=_PAGES)
    tables = {"lines": _line_rows(pages_table, page_keys), "pages": pages_table}
    if job["shapes"]:
        tables["edges"] = np.array(edges, dtype=EDGES)
        tables["body"] = np.array([(h, w, n) for (h, w), n in body.items()], dtype=BODY)
    for folder, records in tables.items():
        save_partitioned(records, records["host"] % parts, work / folder, "p", name)
    make_folder(work / "line_keys")
    save_array(work / "line_keys" / f"{name}.npz", None, counts=np.array(counts, dtype=np.int64),
               keys=np.concatenate(page_keys) if page_keys else np.zeros(0, dtype=np.uint64))
    return seen


def _line_rows(pages: np.ndarray, page_keys: list[np.ndarray]) -> np.ndarray:
    """(host, line, page) of every non-blank line of the pages with a host, in columns (a line twice
    on a page is two rows: the reduce counts distinct pages)."""
    counts = np.array([len(keys) for keys in page_keys], dtype=np.int64)
    rows = np.empty(int(counts.sum()), dtype=_LINES)
    rows["line"] = np.concatenate(page_keys) if page_keys else np.zeros(0, dtype=np.uint64)
    rows["host"], rows["page"] = np.repeat(pages["host"], counts), np.repeat(pages["page"], counts)
    return rows


def _new_rows(cols: list[np.ndarray]) -> np.ndarray:
    """Per row of sorted columns: whether it differs from the row before (the first row does)."""
    new = np.zeros(len(cols[0]), dtype=bool)
    new[:1] = True
    for col in cols:
        new[1:] |= col[1:] != col[:-1]
    return new


def _distinct(*cols: np.ndarray) -> list[np.ndarray]:
    """The distinct rows of equal-length columns, sorted by the first column, then the next..."""
    order = np.lexsort(cols[::-1])
    cols = [col[order] for col in cols]
    new = _new_rows(cols)
    return [col[new] for col in cols]


def _count_by(*cols: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Sorted columns grouped by equal rows: (each group's values, rows per group)."""
    starts = np.flatnonzero(_new_rows(list(cols)))
    return [col[starts] for col in cols], np.diff(np.r_[starts, len(cols[0])])


def _shape_templates(work: Path, part: str, host_pages: dict[int, int],
                     job: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """(host, key) columns of the anchors and template shapes of one host partition's hosts of at
    least min_host_docs pages, and the number of shapes."""
    edges, body = load_partition(work / "edges" / part), load_partition(work / "body" / part)
    if edges is None or not job["shapes"]:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64), 0
    body = np.empty(0, dtype=BODY) if body is None else body  # pages too short for a body sample
    host_pages = {h: n for h, n in host_pages.items() if n >= job["min_host_docs"]}
    slot_words = _count_by(*_distinct(edges["host"], edges["slot"], edges["word"], edges["page"])[:3])
    anchors = find_anchors(slot_words, body, host_pages, job["min_docs"], job["min_fraction"])
    shapes = find_shapes(edges, anchors, host_pages, job["min_docs"], job["min_fraction"])
    shaped = {h for h, _ in shapes}
    keys = shapes + [(h, anchor_key(s, w)) for h, s, w in anchors if h in shaped]
    host, key = (np.array(col, dtype=np.uint64) for col in zip(*keys)) if keys else (np.empty(0, np.uint64),) * 2
    return host, key, len(shapes)


def _template_task(job: dict) -> dict:
    """Reduce: the template lines (and anchors and shapes) of one host partition, written to
    templates/s<shard>/ for every shard holding a page of their host; returns counts."""
    work, part = location(job["work"]), f"p{job['part']:06d}"
    pages = load_partition(work / "pages" / part)
    if pages is None:
        return {"hosts": 0, "hosts_with_template": 0, "template_lines": 0, "template_shapes": 0}
    lines = load_partition(work / "lines" / part)
    lines = np.empty(0, dtype=_LINES) if lines is None else lines  # only pages without text
    (hosts,), host_pages = _count_by(*_distinct(pages["host"], pages["page"])[:1])
    (line_host, line), line_pages = _count_by(*_distinct(lines["host"], lines["line"], lines["page"])[:2])
    of_host = host_pages[np.searchsorted(hosts, line_host)]
    template = ((of_host >= job["min_host_docs"]) & (line_pages >= job["min_docs"])
                & (line_pages >= job["min_fraction"] * of_host))
    shape_host, shape_key, shapes = _shape_templates(work, part, dict(zip(hosts.tolist(), host_pages.tolist())), job)
    found = {"hosts": len(hosts), "hosts_with_template": len(np.unique(np.r_[line_host[template], shape_host])),
             "template_lines": int(template.sum()), "template_shapes": shapes}
    line_host, line = np.r_[line_host[template], shape_host], np.r_[line[template], shape_key]
    # each template line goes to every shard that holds a page of its host
    route_host, route_shard = _distinct(pages["host"], pages["shard"])
    first = np.searchsorted(route_host, line_host, "left")
    count = np.searchsorted(route_host, line_host, "right") - first
    rows = np.repeat(np.arange(len(line)), count)
    routes = np.repeat(first - np.cumsum(count) + count, count) + np.arange(count.sum())
    out = np.empty(len(rows), dtype=_TEMPLATE)
    out["host"], out["line"] = line_host[rows], line[rows]
    save_partitioned(out, route_shard[routes], work / "templates", "s", part)
    return found


def _templates_of_shard(work: Path, shard: int) -> dict[int, set[int]]:
    """{host: template line hashes} for the hosts of one shard."""
    records = load_partition(work / "templates" / f"s{shard:06d}")
    if records is None:
        return {}
    records = np.sort(records, order=["host", "line"])
    starts = np.flatnonzero(_new_rows([records["host"]]))
    return {int(records["host"][s]): set(part.tolist())
            for s, part in zip(starts.tolist(), np.split(records["line"], starts[1:]))}


def _rewrite_task(job: dict) -> dict:
    """Map: one shard rewritten without its pages' template regions; returns its counters."""
    work = location(job["work"])
    templates = _templates_of_shard(work, job["shard"])
    with load_array(work / "line_keys" / f"s{job['shard']:06d}.npz") as data:
        all_keys, ends = data["keys"], np.cumsum(data["counts"]).tolist()
    starts = [0, *ends[:-1]]
    counters: Counter = Counter()
    dst = location(job["dst"])

    def kept(drops: DropLog):
        for number, doc in enumerate(read_shard(location(job["src"]))):
            counters["in"] += 1
            counters["bytes_in"] += doc.nbytes
            host = site_key(doc.meta.get("url"))
            if host is None:
                counters["no_url"] += 1
            template = templates.get(host, set())
            # the count step's keys of this page (a shard that changed since is refused by run())
            keys = all_keys[starts[number]:ends[number]].tolist() if template and number < len(ends) else None
            text, removed = strip_template(doc.text, template, job["min_run"], keys)
            if removed:
                counters["lines_removed"] += removed
                counters["docs_changed"] += 1
                doc.text = text
            if removed and not text.strip():
                counters[f"dropped:{DROP_REASON}"] += 1
                drops.add(doc.id, doc.meta.get("url") or "", "site_lines", DROP_REASON)
                continue
            counters["out"] += 1
            counters["bytes_out"] += doc.nbytes
            yield doc

    with DropLog(log_path(dst)) as drops:
        write_shard(dst, kept(drops), job.get("level", LEVEL))
    return dict(counters)


@register_stage("site_lines")
class SiteLines(GlobalStage):
    """Remove the lines that repeat across a host's pages where they form the page's template."""

    def __init__(self, min_docs: int = 5, min_fraction: float = 0.3, min_host_docs: int = 10,
                 min_run: int = 2, partitions: int = 16, shapes: bool = True) -> None:
        for name, value, least in (("min_docs", min_docs, 2), ("min_host_docs", min_host_docs, 1),
                                   ("min_run", min_run, 1), ("partitions", partitions, 1)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if not 0 < min_fraction <= 1:
            raise ValueError(f"min_fraction must be in (0, 1], got {min_fraction!r}")
        if not isinstance(shapes, bool):
            raise ValueError(f"shapes must be true or false, got {shapes!r}")
        super().__init__(min_docs=min_docs, min_fraction=min_fraction, min_host_docs=min_host_docs,
                         min_run=min_run, partitions=partitions, shapes=shapes)

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Rewrite ``inputs`` into ``out_dir``; counters: in/out/dropped:site_boilerplate,
        lines_removed, docs_changed, hosts, hosts_with_template, template_lines, template_shapes, no_url."""
        out_dir = location(out_dir)
        work = out_dir / "_work_site_lines"
        remove_tree(work)
        p = self.params
        jobs = [{"shard": i, "path": str(path), "work": str(work), "partitions": p["partitions"],
                 "shapes": p["shapes"]} for i, path in enumerate(inputs)]
        seen = sum(executor.map(_count_task, jobs, desc="site_lines: count"))
        parts = [{"work": str(work), "part": part, "min_docs": p["min_docs"], "min_fraction": p["min_fraction"],
                  "min_host_docs": p["min_host_docs"], "shapes": p["shapes"]} for part in range(p["partitions"])]
        for found in executor.map(_template_task, parts, desc="site_lines: templates"):
            self.counters.update(found)
        writes = [{"work": str(work), "shard": i, "src": str(src), "dst": str(dst), "min_run": p["min_run"],
                   "level": output_level(self.work_outputs)}
                  for i, (src, dst) in enumerate(zip(inputs, output_paths(inputs, out_dir)))]
        for found in executor.map(_rewrite_task, writes, desc="site_lines: write"):
            self.counters.update(found)
        if self.counters["in"] != seen:  # a shard changed between the two reads
            raise CurateError(f"site_lines: counted {seen} documents, rewrote {self.counters['in']}")
        remove_tree(work)
        return output_paths(inputs, out_dir)
