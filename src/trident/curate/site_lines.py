"""Repeated lines across a site's pages: navigation, footers, cookie and version banners.

trident's addition to MT-NLG's recipe (which has no such stage): extraction keeps what a page's
markup does not mark as chrome, so every page of a site may carry the same menu and footer lines.
A line is *template* for a host when it occurs in at least ``min_docs`` distinct pages of that
host and in at least ``min_fraction`` of them; hosts with fewer than ``min_host_docs`` distinct
pages are left alone. A template line is removed only where it stands in the page's template
region: in the run of template lines that starts or ends the page, or in a run of at least
``min_run`` consecutive template lines inside it; a lone template line between content lines
(a subheading "Downloads" equal to a menu item) is content and stays. Pages left without text
are dropped (``dropped:site_boilerplate``, written to the drop log beside the output shard).

Lines are compared case-folded, each run of digits as 0, whitespace collapsed (so "Last updated
2024-03-12" and "Page 3 of 12" are one line per site); blank lines are neither counted nor removed. Pages
are counted once per distinct text, so copies of one page under several URLs (crawl variants
that dedup removes later) do not make its article lines template. The host is the URL's, lower
case, without "www."; documents without a URL pass untouched (counted ``no_url``).

A map/reduce over files, as dedup (the driver gets counts only):
  1. per shard: (host, line, page) hashes of every page, and (host, page, shard), by host partition;
  2. per partition: distinct pages per host and per (host, line); template lines sent, as files,
     to each shard that holds a page of their host;
  3. per shard: rewrite it without the template regions of its pages.
"""
from __future__ import annotations

import re
from collections import Counter
from itertools import groupby
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import xxhash

from trident.curate.dedup_shared import load_partition, save_partitioned
from trident.curate.document import CurateError
from trident.curate.droplog import DropLog, log_path
from trident.curate.shards import read_shard, write_shard
from trident.curate.stage import Executor, GlobalStage, output_paths, register_stage
from trident.text.storage import location, remove_tree

_DIGITS = re.compile(r"\d+")
_LINES = [("host", "u8"), ("line", "u8"), ("page", "u8")]
_PAGES = [("host", "u8"), ("page", "u8"), ("shard", "u4")]
_TEMPLATE = [("host", "u8"), ("line", "u8")]
DROP_REASON = "site_boilerplate"


def line_key(line: str) -> int:
    """xxh3-64 of a line as compared across pages: case-folded, digit runs -> 0, whitespace collapsed."""
    line = line.casefold()
    if _DIGITS.search(line):  # most lines have no digit: a search is cheaper than a substitution
        line = _DIGITS.sub("0", line)
    return xxhash.xxh3_64_intdigest(" ".join(line.split()).encode("utf-8"))


def site_key(url) -> int | None:
    """xxh3-64 of a URL's host (lower case, "www." removed); None without a URL or host."""
    try:
        host = urlsplit(url).hostname if isinstance(url, str) else None
    except ValueError:  # a malformed URL ("http://[x") names no host
        host = None
    return xxhash.xxh3_64_intdigest(host.removeprefix("www.").encode("utf-8")) if host else None


def template_region(flags: list[bool], min_run: int) -> list[bool]:
    """Which lines to remove, given which are template: runs of template lines that touch either
    end of the page, or are at least ``min_run`` long."""
    out: list[bool] = []
    for is_template, run in groupby(flags):
        n = len(list(run))
        edge = not out or len(out) + n == len(flags)
        out += [is_template and (edge or n >= min_run)] * n
    return out


def strip_template(text: str, template: set[int], min_run: int) -> tuple[str, int]:
    """(``text`` without its template region, lines removed); blank lines that a removal left
    at either end or next to another blank line go too."""
    if not template:
        return text, 0
    lines = text.split("\n")
    filled = [i for i, line in enumerate(lines) if line.strip()]
    region = template_region([line_key(lines[i]) in template for i in filled], min_run)
    remove = {i for i, r in zip(filled, region) if r}
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
    """Map: (host, line, page) and (host, page, shard) records of one shard, by host partition;
    returns the documents seen."""
    lines: list[tuple[int, int, int]] = []
    pages: list[tuple[int, int, int]] = []
    seen = 0
    for doc in read_shard(location(job["path"])):
        seen += 1
        host = site_key(doc.meta.get("url"))
        if host is None:
            continue
        keys = [line_key(line) for line in doc.text.split("\n") if line.strip()]
        # a page is its normalised lines in order: copies of one page under other URLs count once
        page = xxhash.xxh3_64_intdigest(np.array(keys, dtype=np.uint64).tobytes())
        pages.append((host, page, job["shard"]))
        lines += [(host, key, page) for key in set(keys)]
    line_records, page_records = np.array(lines, dtype=_LINES), np.array(pages, dtype=_PAGES)
    work, parts, name = location(job["work"]), np.uint64(job["partitions"]), f"s{job['shard']:06d}"
    save_partitioned(line_records, line_records["host"] % parts, work / "lines", "p", name)
    save_partitioned(page_records, page_records["host"] % parts, work / "pages", "p", name)
    return seen


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


def _template_task(job: dict) -> dict:
    """Reduce: the template lines of one host partition, written to templates/s<shard>/ for every
    shard holding a page of their host; returns counts."""
    work = location(job["work"])
    pages = load_partition(work / "pages" / f"p{job['part']:06d}")
    if pages is None:
        return {"hosts": 0, "hosts_with_template": 0, "template_lines": 0}
    lines = load_partition(work / "lines" / f"p{job['part']:06d}")
    lines = np.empty(0, dtype=_LINES) if lines is None else lines  # only pages without text
    (hosts,), host_pages = _count_by(*_distinct(pages["host"], pages["page"])[:1])
    (line_host, line), line_pages = _count_by(*_distinct(lines["host"], lines["line"], lines["page"])[:2])
    of_host = host_pages[np.searchsorted(hosts, line_host)]
    template = ((of_host >= job["min_host_docs"]) & (line_pages >= job["min_docs"])
                & (line_pages >= job["min_fraction"] * of_host))
    line_host, line = line_host[template], line[template]
    # each template line goes to every shard that holds a page of its host
    route_host, route_shard = _distinct(pages["host"], pages["shard"])
    first = np.searchsorted(route_host, line_host, "left")
    count = np.searchsorted(route_host, line_host, "right") - first
    rows = np.repeat(np.arange(len(line)), count)
    routes = np.repeat(first - np.cumsum(count) + count, count) + np.arange(count.sum())
    out = np.empty(len(rows), dtype=_TEMPLATE)
    out["host"], out["line"] = line_host[rows], line[rows]
    save_partitioned(out, route_shard[routes], work / "templates", "s", f"p{job['part']:06d}")
    return {"hosts": len(hosts), "hosts_with_template": len(np.unique(line_host)), "template_lines": len(line)}


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
    templates = _templates_of_shard(location(job["work"]), job["shard"])
    counters: Counter = Counter()
    dst = location(job["dst"])

    def kept(drops: DropLog):
        for doc in read_shard(location(job["src"])):
            counters["in"] += 1
            counters["bytes_in"] += doc.nbytes
            host = site_key(doc.meta.get("url"))
            if host is None:
                counters["no_url"] += 1
            text, removed = strip_template(doc.text, templates.get(host, set()), job["min_run"])
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
        write_shard(dst, kept(drops))
    return dict(counters)


@register_stage("site_lines")
class SiteLines(GlobalStage):
    """Remove the lines that repeat across a host's pages where they form the page's template."""

    def __init__(self, min_docs: int = 5, min_fraction: float = 0.3, min_host_docs: int = 10,
                 min_run: int = 2, partitions: int = 16) -> None:
        for name, value, least in (("min_docs", min_docs, 2), ("min_host_docs", min_host_docs, 1),
                                   ("min_run", min_run, 1), ("partitions", partitions, 1)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if not 0 < min_fraction <= 1:
            raise ValueError(f"min_fraction must be in (0, 1], got {min_fraction!r}")
        super().__init__(min_docs=min_docs, min_fraction=min_fraction, min_host_docs=min_host_docs,
                         min_run=min_run, partitions=partitions)

    def run(self, inputs: list[Path], out_dir: Path, executor: Executor) -> list[Path]:
        """Rewrite ``inputs`` into ``out_dir``; counters: in/out/dropped:site_boilerplate,
        lines_removed, docs_changed, hosts, hosts_with_template, template_lines, no_url."""
        out_dir = location(out_dir)
        work = out_dir / "_work_site_lines"
        remove_tree(work)
        p = self.params
        jobs = [{"shard": i, "path": str(path), "work": str(work), "partitions": p["partitions"]}
                for i, path in enumerate(inputs)]
        seen = sum(executor.map(_count_task, jobs, desc="site_lines: count"))
        parts = [{"work": str(work), "part": part, "min_docs": p["min_docs"], "min_fraction": p["min_fraction"],
                  "min_host_docs": p["min_host_docs"]} for part in range(p["partitions"])]
        for found in executor.map(_template_task, parts, desc="site_lines: templates"):
            self.counters.update(found)
        writes = [{"work": str(work), "shard": i, "src": str(src), "dst": str(dst), "min_run": p["min_run"]}
                  for i, (src, dst) in enumerate(zip(inputs, output_paths(inputs, out_dir)))]
        for found in executor.map(_rewrite_task, writes, desc="site_lines: write"):
            self.counters.update(found)
        if self.counters["in"] != seen:  # a shard changed between the two reads
            raise CurateError(f"site_lines: counted {seen} documents, rewrote {self.counters['in']}")
        remove_tree(work)
        return output_paths(inputs, out_dir)
