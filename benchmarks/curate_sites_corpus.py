"""Common-Crawl-like .warc.gz files of multi-site HTML for benchmarks/curate_sites.py, with the truth.

Hosts: a few large ones and a Zipf tail of smaller ones, each with its own template in one of four
markups: semantic (header/nav/aside/footer, a cookie dialog), div soup with neutral class names
(a "Home | Docs | ..." bar, a "Home » Docs » Section" trail, a sidebar box, a footer), a DocBook
manual (navheader table, a "Prev Up Chapter N. Title Home Next" line under the page, the manual's
name), and a legacy table layout. Every page has a <head> with CSS and scripts, a copyright line
and a "Last updated <date>" line. Articles: a title, paragraphs, and on most pages a bulleted list
whose items are links with a sentence after them, a definition list, and a parameter table whose
last column is prose, under shared subheadings ("Functions", "Parameters", "Notes"). Sentences are
drawn without repeats per page from the Python language reference (benchmarks/curate_corpus.py).

Around them: exact duplicates (the same page bytes under another URL of its host), near duplicates
(3% of the words of the paragraphs changed, on another host's template), German and French pages,
404 pages, and damaged records, one of each kind per damaged file: a bad HTTP status line, a
flipped byte in one gzip member, a bad WARC header, and a truncated tail (the file ends inside its
last record). Files: one gzip member per record, a warcinfo record first. Deterministic for a seed.

Truth, per URL: kind, host, the unique article it copies (group), the planted content by category
(title, headings, paragraphs, list items, definitions, table cells: the prose the page carries),
and the template lines of the page (its site chrome as extracted text shows it, one per line).
"""
from __future__ import annotations

import gzip
import html
import random
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from curate_corpus import near_copy, sentence_pool
from trident.curate.samples.crawl import FRENCH, GERMAN

MIX = {"exact_duplicate": 0.06, "near_duplicate": 0.06, "german": 0.03, "french": 0.03, "not_found": 0.02}
DAMAGE = ("bad_http_block", "damaged_gzip_member", "malformed_warc_record", "truncated_record")
STYLES = ("semantic", "divs", "manual", "table")
WORDS = ("table index query value result column server client record number system program memory "
         "function option request answer window garden river letter market signal picture station "
         "network library student teacher engine season method pattern problem reason history").split()
MENU = ("Home", "Docs", "Blog", "Downloads", "Community", "About us", "Contact", "Pricing", "Support",
        "News", "Tutorials", "Careers")
SECTIONS = ("Getting started", "Queries", "Data types", "Administration", "Performance", "Security")
TYPES = ("int", "str", "bool", "float | None", "Callable", "bytes")
CATEGORIES = ("title", "headings", "paragraphs", "list items", "definitions", "table cells")
_CSS = "".join(f".c{i}{{margin:{i}px;padding:{i % 7}px;color:#{i * 4099 % 4096:03x}}}" for i in range(60))
_SCRIPT = ("window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments)}gtag('js',new Date());"
           * 8)


@dataclass
class Page:
    """The truth of one URL; `content` maps a category of CATEGORIES to its planted texts."""

    kind: str
    host: str
    group: int = -1
    file: str = ""
    content: dict[str, list[str]] = field(default_factory=dict)
    template: list[str] = field(default_factory=list)


def prose_pool() -> list[str]:
    """The reference's sentences without its ASCII tables and grammar listings, at most 50 words."""
    return [s for s in sentence_pool() if len(s.split()) <= 50 and "--" not in s and "==" not in s and "::=" not in s]


def _title(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).title()


def host_template(rng: random.Random, index: int) -> dict:
    """One host's template: name, markup style, menu, sidebar links, manual sections, footer links."""
    return {"host": f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{index}.example.org", "name": _title(rng, 2),
            "style": STYLES[index % len(STYLES)], "menu": rng.sample(MENU, rng.randint(5, 7)),
            "sidebar": [_title(rng, 3) for _ in range(rng.randint(4, 6))],
            "sections": rng.sample(SECTIONS, rng.randint(2, 4)),
            "footer": rng.sample(["Privacy policy", "Terms of use", "Cookie settings", "Imprint", "Sitemap",
                                  "Accessibility", "Press"], 4)}


def article(rng: random.Random, pool: list[str]) -> dict[str, list]:
    """Planted content: title, 3-5 paragraphs, and (mostly) a link list, a definition list and a
    parameter table; no sentence twice on a page."""
    sentences = iter(rng.sample(pool, 45))
    para = lambda: " ".join(next(sentences) for _ in range(rng.randint(3, 5)))
    names = rng.sample([f"{a}_{b}" for a in WORDS[:12] for b in WORDS[12:24]], 16)
    art = {"title": [_title(rng, 5)], "paragraphs": [para() for _ in range(rng.randint(3, 5))],
           "links": [], "definitions": [], "rows": []}
    if rng.random() < 0.75:
        art["links"] = [(f"{names.pop()}()", next(sentences)) for _ in range(rng.randint(3, 6))]
    if rng.random() < 0.5:
        art["definitions"] = [(names.pop(), next(sentences)) for _ in range(rng.randint(2, 4))]
    if rng.random() < 0.6:
        art["rows"] = [(names.pop(), rng.choice(TYPES), next(sentences)) for _ in range(rng.randint(2, 5))]
    return art


def planted(art: dict) -> dict[str, list[str]]:
    """The truth of an article: its prose by category."""
    headings = [h for h, key in (("Functions", "links"), ("Notes", "definitions"), ("Parameters", "rows")) if art[key]]
    return {"title": art["title"], "headings": headings, "paragraphs": list(art["paragraphs"]),
            "list items": [f"{name} — {text}" for name, text in art["links"]],
            "definitions": [text for _, text in art["definitions"]],
            "table cells": [text for _, _, text in art["rows"]]}


def article_html(art: dict, heading: str = "h1") -> str:
    esc = html.escape
    paras = [f"<p>{esc(p)}</p>" for p in art["paragraphs"]]
    parts = [f"<{heading}>{esc(art['title'][0])}</{heading}>", *paras[:2]]
    if art["links"]:
        items = "".join(f'<li><a href="/ref/{n[:-2]}.html"><code>{esc(n)}</code></a> — {esc(t)}</li>'
                        for n, t in art["links"])
        parts += ["<h2>Functions</h2>", f"<ul>{items}</ul>"]
    parts += paras[2:-1]
    if art["rows"]:
        rows = "".join(f"<tr><td><code>{esc(n)}</code></td><td>{esc(t)}</td><td>{esc(d)}</td></tr>"
                       for n, t, d in art["rows"])
        parts += ["<h2>Parameters</h2>", f'<table class="params"><thead><tr><th>Parameter</th><th>Type</th>'
                                         f"<th>Description</th></tr></thead><tbody>{rows}</tbody></table>"]
    if art["definitions"]:
        defs = "".join(f"<dt>{esc(n)}</dt><dd>{esc(d)}</dd>" for n, d in art["definitions"])
        parts += ["<h2>Notes</h2>", f"<dl>{defs}</dl>"]
    return "".join(parts + paras[-1:])


def page_html(site: dict, art: dict, page: int, rng: random.Random) -> tuple[str, list[str]]:
    """(the HTML of an article page in its host's template, the page's template lines)."""
    section = page % len(site["sections"])
    chapter = f"Chapter {section + 1}. {site['sections'][section]}"
    cookie = "We use cookies to personalise content and to analyse our traffic."
    copyright_line = f"© 2009-2024 {site['name']}. All rights reserved."
    updated = f"Last updated {rng.randint(2015, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    body, lines = _RENDER[site["style"]](site, art, chapter, cookie, copyright_line, updated)
    head = (f'<head><meta charset="utf-8"><title>{html.escape(art["title"][0])} | {html.escape(site["name"])}'
            f'</title><meta name="viewport" content="width=device-width"><link rel="stylesheet" href="/s.css">'
            f"<style>{_CSS}</style><script>{_SCRIPT}</script></head>")
    return f'<!DOCTYPE html><html lang="en">{head}<body>{body}</body></html>', lines + [copyright_line, updated]


def _semantic(site, art, chapter, cookie, copyright_line, updated):
    menu = "".join(f'<li><a href="/{m.lower()}">{m}</a></li>' for m in site["menu"])
    side = "".join(f'<li><a href="/p/{i}">{s}</a></li>' for i, s in enumerate(site["sidebar"]))
    links = "".join(f'<li><a href="/{f.lower()}">{f}</a></li>' for f in site["footer"])
    crumbs = ["Home", "Docs", chapter.split(". ", 1)[1]]
    trail = "".join(f"<li>{c}</li>" for c in crumbs)
    body = (f'<header class="site-header"><a class="brand" href="/">{site["name"]}</a><nav class="main-nav"><ul>'
            f'{menu}</ul></nav></header><div id="cookie-banner" class="cookie-consent" role="dialog"><p>{cookie}</p>'
            f'<button>Accept all</button></div><div class="container"><nav aria-label="breadcrumb">'
            f'<ol class="breadcrumb">{trail}</ol></nav><main><article>{article_html(art)}</article></main>'
            f'<aside class="sidebar"><h3>Popular pages</h3><ul>{side}</ul></aside></div><footer class="site-footer">'
            f'<ul class="footer-links">{links}</ul><p>{copyright_line}</p><p>{updated}</p></footer>')
    return body, [site["name"], *site["menu"], cookie, "Accept all", *crumbs, "Popular pages", *site["sidebar"],
                  *site["footer"]]


def _divs(site, art, chapter, cookie, copyright_line, updated):
    bar = " | ".join(site["menu"])
    trail = f"Home » Docs » {chapter.split('. ', 1)[1]}"
    side = "<br>".join(f'<a href="/p/{i}">{s}</a>' for i, s in enumerate(site["sidebar"]))
    links = " · ".join(site["footer"])
    body = (f'<div id="top"><div id="logo">{site["name"]}</div><div class="bar">'
            + " | ".join(f'<a href="/{m.lower()}">{m}</a>' for m in site["menu"]) + "</div></div>"
            f'<div class="strip">{cookie} <a href="/ok">Accept all</a></div><div id="wrap"><div id="where">'
            f'{html.escape(trail)}</div><div id="content"><div class="entry">{article_html(art, "h2")}</div></div>'
            f'<div id="right"><div class="box"><b>Popular pages</b><br>{side}</div></div></div>'
            f'<div id="bottom"><p>{links}</p><p>{copyright_line}</p><p>{updated}</p></div>')
    return body, [site["name"], bar, f"{cookie} Accept all", trail, "Popular pages", *site["sidebar"], links]


def _manual(site, art, chapter, cookie, copyright_line, updated):
    nav_line = f"Prev Up {chapter} Home Next"
    top = (f'<div class="navheader"><table width="100%" summary="Navigation header"><tr><th colspan="3" align="center">'
           f'{chapter}</th></tr><tr><td width="20%" align="left"><a accesskey="p" href="prev.html">Prev</a> </td>'
           f'<th width="60%" align="center"> </th><td width="20%" align="right"> <a accesskey="n" href="next.html">'
           f"Next</a></td></tr></table><hr></div>")
    bottom = (f'<div class="navfooter"><hr><p><a accesskey="p" href="prev.html">Prev</a> '
              f'<a accesskey="u" href="up.html">Up</a> {chapter} <a accesskey="h" href="index.html">Home</a> '
              f'<a accesskey="n" href="next.html">Next</a></p>'
              f"<p>{site['name']} Manual</p></div>")
    body = (f'{top}<div class="sect1"><div class="titlepage">{article_html(art, "h2")}</div></div>{bottom}'
            f'<div class="legal"><p>{copyright_line}</p><p>{updated}</p></div>'
            f'<div id="consent"><p>{cookie} <a href="/ok">Accept all</a></p></div>')
    return body, [chapter, "Prev Next", "Prev", "Next", nav_line, f"{site['name']} Manual", f"{cookie} Accept all"]


def _table(site, art, chapter, cookie, copyright_line, updated):
    menu = "&nbsp;|&nbsp;".join(f'<a href="/{m.lower()}">{m}</a>' for m in site["menu"])
    side = "<br>".join(f'<a href="/p/{i}">{s}</a>' for i, s in enumerate(site["sidebar"]))
    body = (f'<table width="100%" cellpadding="4"><tr><td colspan="2"><font size="5">{site["name"]}</font><br>{menu}'
            f'</td></tr><tr><td width="180" valign="top"><b>Popular pages</b><br>{side}</td><td valign="top">'
            f"{article_html(art)}</td></tr><tr><td colspan=\"2\"><p>{' - '.join(site['footer'])}</p>"
            f"<p>{copyright_line}</p><p>{updated}</p><p>{cookie}</p></td></tr></table>")
    return body, [site["name"], " | ".join(site["menu"]), "Popular pages", *site["sidebar"],
                  " - ".join(site["footer"]), cookie]


_RENDER = {"semantic": _semantic, "divs": _divs, "manual": _manual, "table": _table}


def plan(records: int, rng: random.Random) -> list[str]:
    """The kinds of `records` response records, shuffled (damaged ones are added per file)."""
    counts = {kind: max(1, round(records * share)) for kind, share in MIX.items()}
    kinds = ["english"] * (records - sum(counts.values()))
    for kind, count in counts.items():
        kinds += [kind] * count
    rng.shuffle(kinds)
    return kinds


def host_weights(hosts: int) -> list[float]:
    """A Zipf share of pages per host: a few large sites, a tail below site_lines' 10 pages."""
    return [1.0 / (rank + 1) for rank in range(hosts)]


def _pages(records: int, seed: int) -> list[tuple[str, int, str, Page]]:
    """[(url, status, html, truth)] of every response record, in crawl order."""
    rng, pool = random.Random(seed), prose_pool()
    sites = [host_template(rng, i) for i in range(max(4, records // 30))]
    weights = host_weights(len(sites))
    out, english = [], []
    for i, kind in enumerate(plan(records, rng)):
        site = rng.choices(sites, weights)[0]
        url = f"https://www.{site['host']}/docs/{i}.html"
        if kind in ("exact_duplicate", "near_duplicate") and english:
            out.append(_duplicate(kind, rng.choice(english), rng, sites, i))
            continue
        if kind in ("exact_duplicate", "near_duplicate", "english"):
            art = article(rng, pool)
            body, template = page_html(site, art, i, rng)
            english.append((len(english), site, art, body, url, template))
            truth = Page("english", site["host"], len(english) - 1, content=planted(art), template=template)
            out.append((url, 200, body, truth))
        else:
            out.append(_other_page(kind, site, url, i, rng))
    return out


def _duplicate(kind: str, original: tuple, rng: random.Random, sites: list[dict], page: int) -> tuple:
    """An exact copy (same bytes, other URL of its host) or a near copy (3% of the paragraph words
    changed, on another host's template) of an earlier unique article."""
    group, site, art, body, first_url, template = original
    if kind == "exact_duplicate":
        truth = Page(kind, site["host"], group, content=planted(art), template=template)
        return f"{first_url}?ref=feed{page}", 200, body, truth
    other = rng.choice([s for s in sites if s is not site])
    copy = {**art, "paragraphs": near_copy(art["paragraphs"], rng)}
    body, template = page_html(other, copy, page, rng)
    url = f"https://www.{other['host']}/syndicated/{page}.html"
    return url, 200, body, Page(kind, other["host"], group, content=planted(copy), template=template)


def _other_page(kind: str, site: dict, url: str, page: int, rng: random.Random) -> tuple:
    """A German or French page, or a 404 page, in the host's template."""
    if kind == "not_found":
        art = {"title": ["Page not found"], "paragraphs": ["The page you requested does not exist."],
               "links": [], "definitions": [], "rows": []}
    else:
        text = GERMAN if kind == "german" else FRENCH
        art = {"title": [text[page % 3].split(".")[0][:60]], "paragraphs": text[page % 3:] + text[:page % 3],
               "links": [], "definitions": [], "rows": []}
    body, template = page_html(site, art, page, rng)
    truth = Page(kind, site["host"], -1, content=planted(art), template=template)
    return url, 404 if kind == "not_found" else 200, body, truth


def warc_member(url: str, status: int, body: bytes, record_id: str, status_line: str | None = None,
                content_length: str | None = None) -> bytes:
    """One gzip member holding one response record; `status_line`/`content_length` override
    the HTTP status line / WARC Content-Length (damage)."""
    reason = {200: "OK", 404: "Not Found"}[status]
    http = (f"{status_line or f'HTTP/1.1 {status} {reason}'}\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Date: 2024-02-20T10:00:00Z\r\nWARC-Record-ID: <urn:uuid:"
            f"{record_id}>\r\nWARC-Target-URI: {url}\r\nContent-Type: application/http; msgtype=response\r\n"
            f"WARC-Identified-Payload-Type: text/html\r\nContent-Length: {content_length or len(http)}\r\n\r\n")
    return gzip.compress(head.encode() + http + b"\r\n\r\n", compresslevel=6, mtime=0)


def warcinfo_member(name: str) -> bytes:
    info = (f"software: trident benchmarks/curate_sites_corpus.py\r\nformat: WARC File Format 1.0\r\n"
            f"filename: {name}\r\n")
    head = (f"WARC/1.0\r\nWARC-Type: warcinfo\r\nWARC-Date: 2024-02-20T10:00:00Z\r\nWARC-Filename: {name}\r\n"
            f"WARC-Record-ID: <urn:uuid:{uuid.UUID(int=len(name))}>\r\nContent-Type: application/warc-fields\r\n"
            f"Content-Length: {len(info)}\r\n\r\n")
    return gzip.compress((head + info + "\r\n\r\n").encode(), compresslevel=6, mtime=0)


def flip_byte(member: bytes) -> bytes:
    """`member` with one byte of its deflate data flipped, where inflating it then fails."""
    for at in range(len(member) // 2, len(member) - 8):
        damaged = member[:at] + bytes([member[at] ^ 0x5A]) + member[at + 1:]
        inflater = zlib.decompressobj(31)
        try:
            inflater.decompress(damaged)
            if not inflater.eof:
                return damaged
        except zlib.error:
            return damaged
    raise ValueError("no byte flip breaks this member")


def damaged_member(reason: str, url: str, body: bytes, record_id: str) -> bytes:
    """A record damaged the way `reason` (one of DAMAGE) names."""
    if reason == "bad_http_block":
        return warc_member(url, 200, body, record_id, status_line="HTTP/1.1 2OO OK")
    if reason == "malformed_warc_record":
        return warc_member(url, 200, body, record_id, content_length="12a4")
    member = warc_member(url, 200, body, record_id)
    return flip_byte(member) if reason == "damaged_gzip_member" else member[:len(member) * 3 // 5]


def write_sites_corpus(folder: Path, records: int = 2000, seed: int = 0, files: int = 4, damaged_files: int = 2,
                       clean: Path | None = None) -> dict[str, Page]:
    """Write `files` .warc.gz files of `records` response records (plus one damaged record of each
    kind in each of the first `damaged_files` files) into `folder`, and the same files without the
    damaged records into `clean` if given (for readers that stop at damage); returns {url: Page}."""
    for path in filter(None, (folder, clean)):
        path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed + 1)
    pages = _pages(records, seed)
    truth: dict[str, Page] = {}
    for index in range(files):
        name = f"CC-SITES-{index:05d}.warc.gz"
        members = [warcinfo_member(name)]
        for url, status, body, page in pages[index::files]:
            members.append(warc_member(url, status, body.encode(), str(uuid.UUID(int=rng.getrandbits(128)))))
            truth[url] = page
            page.file = name
        if clean is not None:
            (clean / name).write_bytes(b"".join(members))
        if index < damaged_files:
            for position, reason in enumerate(DAMAGE):
                url, _, body, page = pages[rng.randrange(len(pages))]
                lost = f"{url.rsplit('.', 1)[0]}-damaged-{index}-{position}.html"
                member = damaged_member(reason, lost, body.encode(), str(uuid.UUID(int=rng.getrandbits(128))))
                at = len(members) if reason == "truncated_record" else rng.randrange(1, len(members))
                members.insert(at, member)
                truth[lost] = Page(f"damaged:{reason}", page.host, -1, name, dict(page.content), list(page.template))
        (folder / name).write_bytes(b"".join(members))
    return truth
