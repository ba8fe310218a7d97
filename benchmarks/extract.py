"""HTML extraction backends of the `extract` stage, side by side: pages/s of CPU and the quality of
the text each keeps, on (a) the generated sample WARCs (trident.curate.samples.crawl) and (b) generated
pages in three layouts with menus, breadcrumbs, share bars, sidebar tables, newsletter forms and
reader-comment sections around a planted article (a paragraph list from the Python reference).

Quality: token-level F1 (multiset of lower-cased words) of each backend's text against the planted
article, and against trafilatura's text (agreement); `leak` is the share of pages whose text holds
a boilerplate marker (menu, cookie banner, comments, sidebar table, footer). The baseline is
trafilatura, measured in the same process; CPU seconds (time.process_time), best of --rounds.

    python benchmarks/extract.py [--pages 300] [--rounds 3]
"""
from __future__ import annotations

import argparse
import html
import random
import re
import time
from collections import Counter

from common import emit_json, print_table
from trident.curate.document import Document
from trident.curate.run.registry import build_stage
from trident.curate.samples.crawl import reference_articles, sample_pages

# (label, extract stage parameters); the first is the baseline
BACKENDS = (("trafilatura", {"backend": "trafilatura"}),
            ("trafilatura+tables", {"backend": "trafilatura", "include_tables": True}),
            ("resiliparse", {"backend": "resiliparse"}))
_TOKEN = re.compile(r"\w+")
# Strings that only ever appear in the boilerplate around the article.
MARKERS = ("Subscribe to our newsletter", "uses cookies", "All rights reserved", "Reader comments",
           "Posted by", "Most read this week", "Share on", "You are here")


def tokens(text: str) -> Counter:
    return Counter(t.lower() for t in _TOKEN.findall(text))


def f1(predicted: str, reference: str) -> float:
    """Token-level F1 of two texts (bags of lower-cased words); 1.0 when both are empty."""
    p, r = tokens(predicted), tokens(reference)
    if not p and not r:
        return 1.0
    overlap = sum((p & r).values())
    return 2 * overlap / (sum(p.values()) + sum(r.values()))


def _comments(rng: random.Random) -> str:
    names = ["mark_t", "Julia R.", "dev_guy", "anna", "Peter"]
    lines = ["Great write-up, thanks for sharing this with everyone.", "I disagree with the second point, "
             "in my experience it depends a lot on the setup you use.", "Does this also work on older versions?"]
    items = "".join(f'<li class="comment"><span class="author">Posted by {rng.choice(names)}</span>'
                    f"<p>{rng.choice(lines)}</p></li>" for _ in range(rng.randint(2, 5)))
    return f'<section id="comments" class="comments"><h3>Reader comments</h3><ol>{items}</ol></section>'


def _sidebar_table(rng: random.Random) -> str:
    rows = "".join(f"<tr><td>{i + 1}</td><td><a href='/p/{rng.randint(1, 999)}'>How to tune item {i}</a>"
                   f"</td><td>{rng.randint(100, 9000)} views</td></tr>" for i in range(5))
    return f'<aside class="sidebar"><h4>Most read this week</h4><table>{rows}</table></aside>'


def generated_page(title: str, paragraphs: list[str], layout: int, rng: random.Random) -> str:
    """An HTML page with `paragraphs` as its article in one of three layouts (semantic tags,
    div soup with class names, a table-based legacy page)."""
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    menu = "".join(f'<li><a href="/{w.lower()}">{w}</a></li>' for w in ("Home", "News", "Guides", "Forum", "Shop"))
    chrome_top = (f'<div class="cookie">This site uses cookies. <button>OK</button></div>'
                  f'<ul class="nav">{menu}</ul><div class="breadcrumb">You are here: Home &gt; Guides</div>')
    share = '<div class="share">Share on Twitter | Share on Facebook | Share by e-mail</div>'
    form = ('<form class="newsletter"><label>Subscribe to our newsletter for weekly tips</label>'
            '<input type="email" name="email"><button>Sign up</button></form>')
    footer = "<div class='footer'>&copy; 2024 Example Media. All rights reserved. Imprint | Privacy</div>"
    head = f"<head><meta charset='utf-8'><title>{html.escape(title)}</title><script>var ads=[];</script></head>"
    if layout == 0:
        inner = (f"<header>{chrome_top}</header><main><article><h1>{html.escape(title)}</h1>{body}{share}</article>"
                 f"{_comments(rng)}</main>{_sidebar_table(rng)}<footer>{form}{footer}</footer>")
    elif layout == 1:
        inner = (f"<div id='top'>{chrome_top}</div><div id='wrap'><div class='post'><h2 class='post-title'>"
                 f"{html.escape(title)}</h2><div class='post-body entry-content'>{body}</div>{share}</div>"
                 f"<div class='comments-area'>{_comments(rng)}</div>{_sidebar_table(rng)}</div>{form}{footer}")
    else:
        inner = (f"<table width='100%'><tr><td colspan='2'>{chrome_top}</td></tr><tr><td width='70%'>"
                 f"<h1>{html.escape(title)}</h1>{body}{share}{_comments(rng)}</td><td>{_sidebar_table(rng)}"
                 f"</td></tr><tr><td colspan='2'>{form}{footer}</td></tr></table>")
    return f"<!DOCTYPE html><html lang='en'>{head}<body>{inner}</body></html>"


def corpora(pages: int) -> dict[str, list[tuple[str, str]]]:
    """{name: [(html, planted article text)]}: the sample WARCs' English pages and generated pages."""
    sample = []
    for seed in range(2):
        for page in sample_pages(140, seed):
            # spam pages repeat one paragraph 40 times: both extractors keep it once, by design
            if page["status"] == 200 and "html" in page["content_type"] and page["kind"] != "spam":
                sample.append((page["body"].decode(), _article_of(page["body"].decode())))
    rng = random.Random(0)
    articles = reference_articles()
    generated = []
    for i in range(pages):
        paragraphs = articles[i % len(articles)].split("\n\n")
        generated.append((generated_page(paragraphs[0][:50], paragraphs, i % 3, rng), "\n".join(paragraphs)))
    return {"sample WARC pages": sample, "generated pages": generated}


def _article_of(page: str) -> str:
    """The planted text of a sample page: its <h1> and <p> elements inside <article>."""
    match = re.search(r"<article>(.*?)</article>", page, re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", match.group(1))) if match else ""


def run_backend(params: dict, pages: list[tuple[str, str]], rounds: int) -> tuple[list[str], float]:
    """(texts, best CPU seconds over `rounds`) of the extract stage with `params` over `pages`."""
    stage = build_stage("extract", params)
    stage.setup()  # library import is start-up, not throughput
    best, texts = float("inf"), []
    for _ in range(rounds):
        docs = [Document(str(i), page, {"content_type": "text/html", "http_status": 200})
                for i, (page, _) in enumerate(pages)]
        start = time.process_time()
        kept = {d.id: d.text for d in stage.process(docs)}
        best = min(best, time.process_time() - start)
        texts = [kept.get(str(i), "") for i in range(len(pages))]
    return texts, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=300, help="generated pages")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (best is kept)")
    args = parser.parse_args()
    results = {}
    for corpus, pages in corpora(args.pages).items():
        rows, outputs = [], {}
        for backend, params in BACKENDS:
            outputs[backend], seconds = run_backend(params, pages, args.rounds)
            texts = outputs[backend]
            results[(corpus, backend)] = {
                "pages_per_s": len(pages) / seconds,
                "f1_article": sum(f1(t, ref) for t, (_, ref) in zip(texts, pages)) / len(pages),
                "f1_trafilatura": sum(f1(t, o) for t, o in zip(texts, outputs["trafilatura"])) / len(pages),
                "leak": sum(any(m in t for m in MARKERS) for t in texts) / len(pages),
                "empty": sum(not t.strip() for t in texts) / len(pages)}
        base = results[(corpus, "trafilatura")]["pages_per_s"]
        for backend, _ in BACKENDS:
            r = results[(corpus, backend)]
            rows.append([backend, len(pages), round(r["pages_per_s"], 1), round(r["pages_per_s"] / base, 2),
                         round(r["f1_article"], 3), round(r["f1_trafilatura"], 3), round(r["leak"], 3),
                         round(r["empty"], 3)])
        print_table(f"extract backends on {corpus} (CPU s, best of {args.rounds})",
                    ["backend", "pages", "pages/s", "x trafilatura", "F1 article", "F1 vs trafilatura",
                     "leak", "empty"], rows)
    emit_json("extract", {f"{c}/{b}": {k: round(v, 4) for k, v in r.items()} for (c, b), r in results.items()})


if __name__ == "__main__":
    main()
