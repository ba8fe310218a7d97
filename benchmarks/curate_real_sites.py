"""curate-cc and its site_lines stage on real documentation sites this project did not generate:
HTML shipped in Debian packages, four generators, each with its own navigation template.

    apt-get install python3.11-doc postgresql-doc-15 libmpfr-doc gettext-doc
    python benchmarks/curate_real_sites.py [--pages N] [--out DIR] [--files] [--site NAME=FOLDER ...]

Each site's pages are written as WARC response records under a URL of the site's host (a crawl of
it), or with --files read from disk as they are (file:// URLs, each folder a site), then curate-cc
runs on them as shipped (keep_work, so the text after extract + langid is kept).
The site_lines stage also runs alone on that text twice, exact lines only (``shapes: false``, the
stage before template shapes) and as shipped, as the baseline and the measured run.

What is measured, per site, from the HTML and independently of the stage:
  navigation        the rows of the generator's navigation markup (DocBook navheader/navfooter table
                    rows, texinfo's header paragraph, texi2html's button tables, Sphinx's related
                    bar) that hold a link; an output line is navigation when its words are all words
                    of one such row of its page, make at least half of that row's words, and hold
                    a word of the row's links (a page title alone is not navigation)
  nav at edges      share of the kept pages whose first or last line is navigation
  prose pages       pages whose main-content paragraphs (<p> outside the navigation) hold at least
                    PROSE_WORDS words: intact English pages with text (index and table-of-contents
                    pages of links only are not counted); "unique": not dropped as a near or exact
                    copy by curate-cc's dedup (each such drop is a verified copy of a kept page)
  kept              share of the unique prose pages curate-cc keeps, and where the others went
  paragraphs        main-content paragraphs found in a page's text before site_lines, how many of
                    them site_lines removed, and the precision: the share it kept (1.000: none removed)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import tempfile
import uuid
from collections import Counter
from pathlib import Path

from common import emit_json, load_average, print_table
from curate_sites_corpus import warc_member, warcinfo_member
from trident.curate.droplog import read_log
from trident.curate.read.shards import read_shard
from trident.curate.run.pipeline import run_pipeline

PROSE_WORDS = 20
# name: (host, generator, folder, file pattern, Debian package)
SITES = {
    "python": ("docs.python.org", "sphinx", "/usr/share/doc/python3.11/html", "**/*.html", "python3.11-doc"),
    "postgresql": ("www.postgresql.org", "docbook", "/usr/share/doc/postgresql-doc-15/html", "*.html",
                   "postgresql-doc-15"),
    "mpfr": ("www.mpfr.org", "texinfo", "/usr/share/doc/libmpfr-doc/mpfr.html", "*.html", "libmpfr-doc"),
    "gettext": ("www.gnu.org", "texi2html", "/usr/share/doc/gettext", "gettext_*.html", "gettext-doc"),
}
# per generator: (XPath of the navigation rows, XPath of the main-content paragraphs)
MARKUP = {
    "sphinx": ("//div[contains(@class,'related')]", "//div[@role='main']//p"),
    "docbook": ("//div[@class='navheader' or @class='navfooter']//tr",
                "//p[not(ancestor::div[@class='navheader' or @class='navfooter'])]"),
    "texinfo": ("//div[@class='header' or @class='nav-panel']//p",
                "//p[not(ancestor::div[@class='header' or @class='nav-panel'])]"),
    "texi2html": ("//table[@cellpadding='1' and @cellspacing='1']//tr", "//p[not(font) and not(ancestor::table)]"),
}
_WORD = re.compile(r"[^\W_]+")


def word_list(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def squeeze(text: str) -> str:
    """Comparison key of a paragraph or page: its words run together."""
    return "".join(word_list(text))


def page_truth(html: bytes, generator: str) -> dict:
    """The navigation rows (word sets, rows with a link only) and main-content paragraphs of a page."""
    import lxml.html

    tree = lxml.html.fromstring(html)
    nav_path, main_path = MARKUP[generator]
    rows = [(set(word_list(" ".join(row.itertext()))), set(word_list(" ".join(a.text_content() for a in links))))
            for row in tree.xpath(nav_path) if (links := row.xpath(".//a[@href]"))]
    paragraphs = [" ".join(p.text_content().split()) for p in tree.xpath(main_path)]
    paragraphs = [p for p in paragraphs if len(word_list(p)) >= 3]
    return {"nav": [r for r in rows if r[1]], "paragraphs": paragraphs,
            "prose": sum(len(word_list(p)) for p in paragraphs) >= PROSE_WORDS}


def is_navigation(line: str, rows: list[tuple[set[str], set[str]]]) -> bool:
    """Whether a line is one of its page's navigation rows (words, words of its links): its words all
    the row's, at least half of them, and a word of a link among them."""
    found = set(word_list(line))
    return any(found <= row and 2 * len(found) >= len(row) and found & links for row, links in rows)


def site_files(root: str, pattern: str, pages: int) -> list[Path]:
    """A site's pages, at most ``pages`` of them spread evenly (0: all)."""
    files = sorted(p for p in Path(root).glob(pattern) if p.is_file() and "_static" not in p.parts)
    return files[:: max(1, len(files) // pages)][:pages] if pages else files


def read_files(sites: dict, pages: int) -> tuple[list[Path], dict[str, dict]]:
    """(the HTML files, {their file:// URL: page truth + site}): input read from disk, each folder a site."""
    files, truth = [], {}
    for name, (_, generator, root, pattern, _) in sites.items():
        for path in site_files(root, pattern, pages):
            files.append(path)
            truth[path.resolve().as_uri()] = page_truth(path.read_bytes(), generator) | {"site": name}
    return files, truth


def write_crawl(sites: dict, folder: Path, pages: int) -> dict[str, dict]:
    """One WARC file per site; returns {url: page truth + site}."""
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    for name, (host, generator, root, pattern, _) in sites.items():
        files = site_files(root, pattern, pages)
        with open(folder / f"{name}.warc.gz", "wb") as fh:
            fh.write(warcinfo_member(f"{name}.warc.gz"))
            for path in files:
                url = f"https://{host}/{path.relative_to(root).as_posix()}"
                body = path.read_bytes()
                record_id = str(uuid.UUID(hashlib.md5(url.encode()).hexdigest()))
                fh.write(warc_member(url, 200, body, record_id))
                truth[url] = page_truth(body, generator) | {"site": name}
    return truth


def texts(paths) -> dict[str, str]:
    return {doc.meta["url"]: doc.text for path in paths for doc in read_shard(path)}


def run_site_lines(inputs: list[Path], out: Path, shapes: bool) -> dict[str, str]:
    """{url: text} after curate-cc's site_lines stage alone (with or without shapes)."""
    from trident.curate.run.pipeline import load_pipeline_config

    spec = next(s for s in load_pipeline_config("curate-cc").stages if s["stage"] == "site_lines")
    config = {"stages": [{**spec, "shapes": shapes}], "progress": False}
    shutil.rmtree(out, ignore_errors=True)
    stats = run_pipeline(config, inputs, out, workers=1)
    return texts(stats["output"]["shards"])


def edges_with_nav(truth: dict, kept: dict[str, str]) -> int:
    count = 0
    for url, text in kept.items():
        lines = [line for line in text.split("\n") if line.strip()]
        rows = truth[url]["nav"]
        count += bool(lines) and (is_navigation(lines[0], rows) or is_navigation(lines[-1], rows))
    return count


def paragraphs_removed(truth: dict, before: dict[str, str], after: dict[str, str]) -> tuple[int, int]:
    """(main-content paragraphs in the text before site_lines, of those missing after it)."""
    present = removed = 0
    for url, text in before.items():
        was, now = squeeze(text), squeeze(after.get(url, ""))
        for paragraph in truth[url]["paragraphs"]:
            key = squeeze(paragraph)
            if key in was:
                present += 1
                removed += key not in now
    return present, removed


def where_dropped(out: Path) -> dict[str, str]:
    """{url: 'stage:reason'} of every document curate-cc dropped."""
    return {r["url"]: f"{r['stage']}:{r['reason']}" for log in out.joinpath("drops").rglob("*.drops.jsonl.zst")
            for r in read_log(log)}


def site_figures(name: str, truth: dict, final: dict, before: dict, exact: dict, shaped: dict, drops: dict) -> dict:
    """The figures of one site (module docstring)."""
    urls = [u for u, t in truth.items() if t["site"] == name]
    prose = [u for u in urls if truth[u]["prose"] and not drops.get(u, "").endswith("duplicate")]
    pick = lambda d: {u: d[u] for u in urls if u in d}  # noqa: E731 - one site's share of a run
    final_site, before_site = pick(final), pick(before)
    lost = Counter(drops.get(u, "?") for u in prose if u not in final)
    present, removed_exact = paragraphs_removed(truth, before_site, pick(exact))
    _, removed_shapes = paragraphs_removed(truth, before_site, pick(shaped))
    return {"pages": len(urls), "unique prose pages": len(prose),
            "kept": round(sum(u in final for u in prose) / max(len(prose), 1), 4), "lost to": dict(lost),
            "output pages": len(final_site),
            "nav at edges, output": round(edges_with_nav(truth, final_site) / max(len(final_site), 1), 4),
            "nav at edges, before site_lines": round(edges_with_nav(truth, before_site) / max(len(before_site), 1), 4),
            "nav at edges, exact lines": round(edges_with_nav(truth, pick(exact)) / max(len(before_site), 1), 4),
            "nav at edges, shapes": round(edges_with_nav(truth, pick(shaped)) / max(len(before_site), 1), 4),
            "paragraphs": present, "paragraphs removed, exact lines": removed_exact,
            "paragraphs removed, shapes": removed_shapes,
            "paragraph precision, exact lines": round(1 - removed_exact / max(present, 1), 4),
            "paragraph precision, shapes": round(1 - removed_shapes / max(present, 1), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=0, help="at most N pages per site, spread evenly (0: all)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--files", action="store_true",
                        help="read the HTML files themselves (file:// URLs: each folder a site) instead of a crawl")
    parser.add_argument("--site", action="append", default=[], metavar="NAME=FOLDER",
                        help="read site NAME from FOLDER instead of its Debian package's")
    args = parser.parse_args()
    sites = dict(SITES)
    for item in args.site:
        name, _, folder = item.partition("=")
        if name not in sites:
            parser.error(f"--site {item}: unknown site {name!r}; known: {', '.join(SITES)}")
        sites[name] = (*sites[name][:2], folder, *sites[name][3:])
    missing = [f"{root} (apt-get install {package})" for _, _, root, _, package in sites.values()
               if not Path(root).is_dir()]
    if missing:
        parser.exit(2, f"curate_real_sites: no such folder: {'; '.join(missing)}\n")
    root = Path(args.out or tempfile.mkdtemp(prefix="curate-real-sites-"))
    shutil.rmtree(root / "warc", ignore_errors=True)
    load_before = load_average()
    if args.files:
        inputs, truth = read_files(sites, args.pages)
    else:
        inputs, truth = [root / "warc"], write_crawl(sites, root / "warc", args.pages)
    out = root / "curated"
    shutil.rmtree(out, ignore_errors=True)
    stats = run_pipeline("curate-cc", inputs, out, workers=1, overrides=["progress=false", "keep_work=true"])
    before_shards = sorted((out / "work" / "phase-00").glob("shard-?????.jsonl.zst"))
    final, before = texts(sorted(out.glob("shard-?????.jsonl.zst"))), texts(before_shards)
    exact = run_site_lines(before_shards, root / "exact", shapes=False)
    shaped = run_site_lines(before_shards, root / "shapes", shapes=True)
    drops = where_dropped(out)
    figures = {name: site_figures(name, truth, final, before, exact, shaped, drops) for name in sites}
    print(f"{len(truth)} pages of {len(sites)} sites; load before {load_before}, after {load_average()}")
    print(f"curate-cc stages: " + ", ".join(f"{s['name']} {s['counters'].get('in', 0)}->{s['counters'].get('out', 0)}"
                                           for s in stats["stages"]))
    keys = [k for k in next(iter(figures.values())) if k != "lost to"]
    print_table("curate-cc on real documentation sites (nav at edges: share of pages that open or close with "
                "their navigation)", ["site", *keys], [[name, *(f[k] for k in keys)] for name, f in figures.items()])
    for name, f in figures.items():
        print(f"{name}: unique prose pages not kept, by stage:reason: {f['lost to'] or 'none'}")
    emit_json("curate_real_sites", {"pages": len(truth), "sites": figures})


if __name__ == "__main__":
    main()
