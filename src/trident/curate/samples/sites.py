"""Pages of web sites that share a template, with the truth: what the `site_lines` stage is
measured on (`python -m trident.curate.samples.sites` prints precision and recall per setting).

Every host has a template, as extracted text shows it: the site's name and its menu items (one a
line), a chapter navigation line shared by the pages of one section ("Prev Up Chapter 2. Queries
Home Next"), a cookie banner (at the top or the bottom, per host), a version banner on about 60%
of the pages (its numbers differ), a share bar inside the article on half of them, and footer
lines (copyright, links, "Last updated <date>"). Between them an article: a unique title and
paragraphs of generated sentences. Planted, content that must stay:
  - a menu item as a subheading in the middle of an article ("content_use"), on 1 page in 6;
  - template words inside sentences ("Next, ...", "Home"), never a whole line;
  - a subheading the host's articles share ("shared_heading": "Example", "See also", "Summary"),
    on 40% of the pages, before the last paragraph (so sometimes next to the share bar);
  - copies of one page under other URLs (host 4) and variants of one page with a paragraph
    changed (host 3): dedup's work, not this stage's;
  - a page whose title is a menu item ("title_use"): it follows the menu, where the template
    region rule cannot tell it from the menu;
  - hosts with few pages, and documents without a URL: untouched.
Deterministic for a seed (random.Random; no data files).
"""
from __future__ import annotations

import random
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trident.curate.document import Document

WORDS = ("table index query value result column server client record number system program memory "
         "function option request answer window garden river letter market signal picture station "
         "network library student teacher engine season method pattern problem reason history "
         "measure surface pressure account process channel message context version partner "
         "quickly often never rarely always carefully usually simply gently slowly").split()
VERBS = "reads writes keeps sends finds builds checks opens closes moves holds shows returns changes".split()
MENU = ("Home", "Docs", "Blog", "Downloads", "Community", "About us", "Contact", "Pricing", "Support",
        "News", "Tutorials", "Careers")
SECTIONS = ("Getting started", "Queries", "Data types", "Administration", "Performance", "Security")
SHARED_HEADINGS = ("Example", "See also", "Summary")
DEFAULT_HOST_PAGES = (60, 40, 25, 15, 12, 8, 3)
LABELS = ("template", "content", "content_use", "shared_heading", "title_use")


@dataclass
class SiteCorpus:
    """Documents and, per document id, one label per line of its text (one of LABELS, or None for
    a blank line); pages per host; the ids of the copies of one page; the pages without a URL."""

    docs: list[Document] = field(default_factory=list)
    labels: dict[str, list[str | None]] = field(default_factory=dict)
    host_pages: dict[str, int] = field(default_factory=dict)
    copies: list[str] = field(default_factory=list)
    no_url: list[str] = field(default_factory=list)

    def add(self, doc_id: str, url: str | None, blocks: list[list[tuple[str, str]]]) -> None:
        """A page from blocks of (line, label): lines of a block on consecutive lines, a blank line between blocks."""
        lines: list[tuple[str, str | None]] = []
        for block in filter(None, blocks):
            lines += ([("", None)] if lines else []) + block
        meta = {"url": url} if url else {}
        self.docs.append(Document(id=doc_id, text="\n".join(line for line, _ in lines), meta=meta))
        self.labels[doc_id] = [label for _, label in lines]


def _sentence(rng: random.Random, lead: str = "") -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 14))]
    words.insert(2, rng.choice(VERBS))
    text = " ".join(words)
    return (lead + text if lead else text[0].upper() + text[1:]) + "."


def _paragraph(rng: random.Random) -> str:
    # one sentence in five carries a menu word inside it: content, never a whole template line
    leads = ["Next, ", "Home users ", "Back at Home, the ", ""]
    return " ".join(_sentence(rng, rng.choice(leads) if rng.random() < 0.2 else "") for _ in range(rng.randint(2, 4)))


def _article(rng: random.Random, menu: list[str], title_use: bool) -> list[list[tuple[str, str]]]:
    """Title and paragraphs; planted: a shared subheading, a menu item as a mid-article subheading."""
    title = rng.choice(menu) if title_use else " ".join(rng.choice(WORDS) for _ in range(5)).title()
    blocks = [[(title, "title_use" if title_use else "content")]]
    blocks += [[(_paragraph(rng), "content")] for _ in range(rng.randint(3, 6))]
    if rng.random() < 0.4:
        blocks.insert(len(blocks) - 1, [(rng.choice(SHARED_HEADINGS), "shared_heading")])
    if rng.random() < 1 / 6:
        blocks.insert(2, [(rng.choice(menu), "content_use")])
    return blocks


def _host(rng: random.Random) -> dict:
    """One host's template: name, menu, sections, where its cookie banner goes."""
    return {"name": " ".join(rng.choice(WORDS).title() for _ in range(2)), "menu": rng.sample(MENU, 6),
            "sections": rng.sample(SECTIONS, rng.randint(2, 4)), "cookie_on_top": rng.random() < 0.5}


def _page(rng: random.Random, site: dict, page: int) -> list[list[tuple[str, str]]]:
    """The blocks of one page: header, cookie banner, version banner, article, share bar, footer."""
    chapter = page % len(site["sections"])
    header = [(site["name"], "template")] + [(item, "template") for item in site["menu"]]
    header.append((f"Prev Up Chapter {chapter + 1}. {site['sections'][chapter]} Home Next", "template"))
    cookie = [("We use cookies to personalise content and to analyse our traffic. Accept all", "template")]
    banner = [(f"You are viewing version {rng.randint(1, 3)}.{rng.randint(0, 9)}. "
               f"The current version is 4.{rng.randint(0, 9)}.", "template")] if rng.random() < 0.6 else []
    footer = [(f"© 2011-2024 {site['name']}. All rights reserved.", "template"),
              ("Privacy policy | Terms of use | Cookie settings", "template"),
              (f"Last updated {rng.randint(2015, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", "template")]
    article = _article(rng, site["menu"], title_use=page % 20 == 7)
    if rng.random() < 0.5:  # a share bar inside the page: a template run with content on both sides
        share = [("Share this article", "template"), ("Twitter Facebook LinkedIn Email", "template")]
        article.insert(len(article) - 1, share)
    top, bottom = (cookie, []) if site["cookie_on_top"] else ([], cookie)
    return [header, top, banner, *article, footer, bottom]


def _near_copy(rng: random.Random, blocks: list) -> list:
    """``blocks`` with the first paragraph after the title replaced (a page variant dedup would catch)."""
    index = next(i for i, block in enumerate(blocks) if block and block[0][1] in ("content", "title_use")) + 1
    return blocks[:index] + [[(_paragraph(rng), "content")]] + blocks[index + 1:]


def site_corpus(host_pages: tuple[int, ...] = DEFAULT_HOST_PAGES, seed: int = 0, copies: int = 4,
                near_copies: int = 4, no_url: int = 3) -> SiteCorpus:
    """Pages of ``len(host_pages)`` hosts (site-<i>.example); ``copies`` more URLs of the first page
    of host 4 and ``near_copies`` variants of the first page of host 3; ``no_url`` pages of host
    0's without a URL; documents in a shuffled order."""
    rng = random.Random(seed)
    corpus = SiteCorpus()
    extra = {4: copies, 3: near_copies}
    for index, pages in enumerate(host_pages):
        host, site = f"site-{index}.example", _host(rng)
        for page in range(pages):
            blocks = _page(rng, site, page)
            corpus.add(f"{host}/page-{page}", f"https://www.{host}/page-{page}", blocks)
            for number in range(1, extra.get(index, 0) + 1 if page == 0 else 1):
                variant = blocks if index == 4 else _near_copy(rng, blocks)
                corpus.add(f"{host}/page-0?ref={number}", f"https://www.{host}/page-0?ref={number}", variant)
        corpus.host_pages[host] = pages + extra.get(index, 0)
    if len(host_pages) > 4:
        corpus.copies = ["site-4.example/page-0"] + [f"site-4.example/page-0?ref={n}" for n in range(1, copies + 1)]
    for doc in [d for d in corpus.docs if d.id.startswith("site-0.example/")][:no_url]:
        doc_id = f"no-url-{len(corpus.no_url)}"
        corpus.docs.append(Document(id=doc_id, text=doc.text, meta={}))
        corpus.labels[doc_id], corpus.no_url = corpus.labels[doc.id], corpus.no_url + [doc_id]
    rng.shuffle(corpus.docs)
    return corpus


def kept_lines(before: str, after: str) -> list[bool]:
    """Per line of ``before``: whether it is still in ``after`` (a subsequence of its lines;
    blank lines count as kept)."""
    rest = [line for line in after.split("\n") if line.strip()]
    flags, j = [], 0
    for line in before.split("\n"):
        match = bool(line.strip()) and j < len(rest) and rest[j] == line
        j += match
        flags.append(match or not line.strip())
    return flags


def score(corpus: SiteCorpus, output: list[Document], hosts: set[str] | None = None) -> dict:
    """Line counts "<label>:kept|removed", template recall and removal precision, over the pages
    of ``hosts`` (all hosts and no-URL pages when None)."""
    after = {doc.id: doc.text for doc in output}
    counts = Counter({f"{label}:{fate}": 0 for label in LABELS for fate in ("kept", "removed")})
    for doc in corpus.docs:
        if hosts is not None and doc.id.split("/")[0] not in hosts:
            continue
        for label, kept in zip(corpus.labels[doc.id], kept_lines(doc.text, after.get(doc.id, ""))):
            if label:
                counts[f"{label}:{'kept' if kept else 'removed'}"] += 1
    removed = sum(v for k, v in counts.items() if k.endswith(":removed"))
    template = counts["template:removed"] + counts["template:kept"]
    return {**counts, "recall": counts["template:removed"] / max(template, 1),
            "precision": counts["template:removed"] / max(removed, 1)}


def measure(settings: list[dict], seed: int = 0, shards: int = 2) -> list[dict]:
    """Run site_lines with each settings dict on the default corpus (in ``shards`` shards, one
    process); per setting: score over the hosts with at least 10 pages, and over all."""
    from trident.curate.run.executors import LocalExecutor
    from trident.curate.read.shards import read_shard, write_shard
    from trident.curate.filters.site_lines import SiteLines

    corpus = site_corpus(seed=seed)
    large = {host for host, n in corpus.host_pages.items() if n >= 10}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        inputs = [Path(folder) / f"in-{i}.jsonl.zst" for i in range(shards)]
        for i, path in enumerate(inputs):
            write_shard(path, corpus.docs[i::shards])
        for number, params in enumerate(settings):
            stage = SiteLines(**params)
            outputs = stage.run(inputs, Path(folder) / f"out-{number}", LocalExecutor(1, progress=False))
            docs = [doc for path in outputs for doc in read_shard(path)]
            rows.append({"params": params, "large": score(corpus, docs, large), "all": score(corpus, docs),
                         "counters": dict(stage.counters)})
    return rows


def main() -> None:
    grid = [{}, {"min_run": 1}, {"min_run": 1000}, {"min_fraction": 0.1}, {"min_fraction": 0.5},
            {"min_docs": 3, "min_host_docs": 5}]
    print("| setting | recall | precision | recall, all hosts | article lines kept | menu item as subheading kept "
          "| shared subheading kept | title = menu item kept |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in measure(grid):
        s = row["large"]
        content = s["content:kept"] / max(s["content:kept"] + s["content:removed"], 1)
        kept = [f"{s[f'{k}:kept']}/{s[f'{k}:kept'] + s[f'{k}:removed']}" for k in LABELS[2:]]
        setting = ", ".join(f"`{k}: {v}`" for k, v in row["params"].items()) or "defaults"
        print(f"| {setting} | {s['recall']:.3f} | {s['precision']:.3f} | {row['all']['recall']:.3f} | "
              f"{content:.3f} | {' | '.join(kept)} |")


if __name__ == "__main__":
    main()
