"""Lists and tables in extraction: how much of an article's text-bearing lists and tables each
`extract` backend keeps, with the list post-pass (`keep_lists`, `keep_tables`) off and on, how
much navigation comes back, and what the post-pass costs.

Pages: generated documentation pages in four layouts (Sphinx-like, a Bootstrap grid with a
sidebar and breadcrumb, a shallow page whose lists sit right under <body>, a blog with widgets),
each an article of paragraphs from the Python reference with planted lists and tables of six
kinds (links with descriptions, descriptive link sentences, API items, a definition list, a
parameter table, a link-free list) among navigation of eight kinds (top menu, sidebar table of
contents, breadcrumb, in-article "on this page" links, Title Case related-article headlines,
pagination, footer links, a recent-posts widget). The second part repeats benchmarks/extract.py's
corpora (sample WARC pages, generated news pages) to show what the post-pass changes there.

Figures: `items kept`: share of planted list items / table cells whose text is in the output;
`nav leak`: share of pages where a navigation label is in the output; `F1 article`: token F1
against the planted article (paragraphs, lists, tables); `leak` (benchmarks/extract.py's corpora):
pages with one of its boilerplate markers; docs/s: CPU seconds, best of --rounds, the
configurations interleaved within each round.

    python benchmarks/extract_lists.py [--pages 300] [--rounds 3]
"""
from __future__ import annotations

import argparse
import html
import random
import re

from common import emit_json, print_table
from extract import MARKERS, corpora, f1, run_backend
from trident.curate.samples.crawl import reference_articles

# (label, extract stage parameters): each backend without and with the post-pass
CONFIGS = (("resiliparse", {"backend": "resiliparse", "keep_lists": False, "keep_tables": False}),
           ("resiliparse + post-pass", {"backend": "resiliparse"}),
           ("trafilatura", {"backend": "trafilatura", "keep_lists": False, "keep_tables": False}),
           ("trafilatura + post-pass", {"backend": "trafilatura"}),
           ("trafilatura tables", {"backend": "trafilatura", "include_tables": True, "keep_lists": False,
                                   "keep_tables": False}),
           ("trafilatura tables + post-pass", {"backend": "trafilatura", "include_tables": True}))
KINDS = ("links with descriptions", "descriptive links", "API items", "definition list", "parameter table",
         "link-free list")
# Navigation labels; none occurs in the Python reference, so any one in the output is a leak.
NAV = {"menu": ["Documentation home", "Tutorials hub", "Community forum", "Release notes", "Report a bug"],
       "toc": ["Getting started", "Installation guide", "Configuration options", "Upgrading guide",
               "Troubleshooting tips", "Frequently asked questions"],
       "crumbs": ["Main page", "User manual"],
       "on_page": ["Jump to overview", "Jump to examples", "Jump to caveats"],
       "related": ["How We Cut Our Build Times in Half With Caching", "Ten Things Every Developer Should Know "
                   "About Packaging", "Why Our Team Moved From Threads to Async Code"],
       "pager": ["Previous topic", "Next topic"],
       "footer": ["Privacy policy", "Terms of use", "Contact the team", "Careers at Example"],
       "widget": ["Recent Posts From the Engineering Blog", "Monthly Newsletter Archive and Highlights"]}
_NAMES = ("timeout", "encoding", "strict", "maxsize", "buffering", "newline", "closefd", "opener", "errors")
_TYPES = ("int", "str", "bool", "float | None", "Callable")


def _sentences(article: str, rng: random.Random, n: int, max_words: int = 18) -> list[str]:
    """`n` sentences of `article` (cut to `max_words`), in random order."""
    found = [s.strip() for s in re.split(r"(?<=[.:;])\s+", article.replace("\n", " ")) if len(s.split()) >= 6]
    return [" ".join(s.split()[:max_words]).rstrip(".,;:") + "." for s in rng.sample(found, min(n, len(found)))]


def _list(items: list[str], tag: str = "ul") -> str:
    return f"<{tag}>" + "".join(items) + f"</{tag}>"


def _links(labels: list[str]) -> str:
    return _list([f'<li><a href="/{i}">{html.escape(label)}</a></li>' for i, label in enumerate(labels)])


def planted_block(kind: str, rng: random.Random, pool: str) -> tuple[str, list[str]]:
    """(HTML, texts of its items or cells) of one planted list or table."""
    said = _sentences(pool, rng, rng.randint(3, 5))
    names = rng.sample(_NAMES, len(said))
    esc = [html.escape(s) for s in said]
    if kind == "links with descriptions":  # the first three words link, the rest describes
        return _list([f'<li><a href="/g/{i}">{" ".join(s.split()[:3])}</a> {" ".join(s.split()[3:])}</li>'
                      for i, s in enumerate(esc)]), said
    if kind == "descriptive links":
        return _list([f'<li><a href="/d/{i}">{s}</a></li>' for i, s in enumerate(esc)]), said
    if kind == "API items":
        return (_list([f'<li><a href="#{n}"><code>{n}()</code></a> &ndash; {s}</li>' for n, s in zip(names, esc)]),
                [f"{n}() – {s}" for n, s in zip(names, said)])
    if kind == "definition list":
        return _list([f'<dt><a href="#{n}"><code>{n}</code></a></dt><dd>{s}</dd>' for n, s in zip(names, esc)],
                     "dl"), names + said
    if kind == "parameter table":
        rows = "".join(f'<tr><td><a href="#{n}"><code>{n}</code></a></td><td>{html.escape(rng.choice(_TYPES))}</td>'
                       f"<td>{s}</td></tr>" for n, s in zip(names, esc))
        head = "<thead><tr><th>Parameter</th><th>Type</th><th>Description</th></tr></thead>"
        return f"<table class='docutils'>{head}<tbody>{rows}</tbody></table>", names + said
    short = [" ".join(s.split()[:rng.randint(2, 4)]).rstrip(".,;:") for s in said]
    return _list([f"<li>{html.escape(s)}</li>" for s in short]), short


def _article(title: str, paragraphs: list[str], blocks: list[str], rng: random.Random) -> str:
    """h1, the paragraphs with the planted blocks between them, and in-article navigation."""
    on_page = '<p class="lead-in">On this page:</p>' + _links(NAV["on_page"])
    parts = [f"<h1>{html.escape(title)}</h1>", on_page if rng.random() < 0.5 else ""]
    for i, par in enumerate(paragraphs):
        parts.append(f"<p>{html.escape(par)}</p>")
        if i < len(blocks):
            parts.append(blocks[i])
    parts.extend(blocks[len(paragraphs):])
    return "".join(parts)


def doc_page(title: str, article: str, layout: int) -> str:
    """A documentation page with `article` (HTML) in one of four layouts, navigation around it."""
    menu, toc, footer = _links(NAV["menu"]), _links(NAV["toc"]), _links(NAV["footer"])
    crumbs = ('<ol class="breadcrumb">' + "".join(f'<li><a href="/">{c}</a></li>' for c in NAV["crumbs"])
              + f"<li>{html.escape(title)}</li></ol>")
    pager = f'<div class="pager"><a href="/p">{NAV["pager"][0]}</a> <a href="/n">{NAV["pager"][1]}</a></div>'
    related = "<h2>Related articles</h2>" + _links(NAV["related"])
    copyright_ = "<p>&copy; 2024 Example Project. All rights reserved.</p>"
    if layout == 0:  # Sphinx
        inner = (f'<div class="related" role="navigation">{menu}</div><div class="document">'
                 f'<div class="documentwrapper"><div class="bodywrapper"><div class="body" role="main"><section>'
                 f'{article}</section></div></div></div><div class="sphinxsidebar" role="navigation">'
                 f'<h3>Table of contents</h3>{toc}</div></div><div class="footer">{footer}{copyright_}</div>')
    elif layout == 1:  # Bootstrap grid, sidebar without a telling class
        inner = (f'<header><nav class="navbar">{menu}</nav></header><div class="container"><div class="row">'
                 f'<div class="col-md-3">{toc}</div><div class="col-md-9">{crumbs}<article>{article}{related}'
                 f"</article>{pager}</div></div></div><footer>{footer}{copyright_}</footer>")
    elif layout == 2:  # shallow: lists right under <body>
        inner = (f'<div id="top">{menu}</div><div id="content">{crumbs}{article}{pager}</div>'
                 f'<div id="bottom">{footer}{copyright_}</div>')
    else:  # blog with widgets
        inner = (f'<div id="page"><header class="site-header">{menu}</header><main><article>'
                 f'<div class="entry-content">{article}</div><div class="related-posts">{related}</div>'
                 f"</article></main>"
                 f'<aside class="widget-area"><section class="widget">{_links(NAV["widget"])}</section></aside>'
                 f'<footer class="site-footer">{footer}{copyright_}</footer></div>')
    head = f"<head><title>{html.escape(title)}</title></head>"
    return f"<!DOCTYPE html><html lang='en'>{head}<body>{inner}</body></html>"


def doc_corpus(pages: int) -> list[dict]:
    """[{html, article, units: {kind: [texts]}}]: pages with 3 planted kinds each, every kind in turn."""
    rng = random.Random(0)
    articles = reference_articles()
    corpus = []
    for i in range(pages):
        paragraphs = articles[i % len(articles)].split("\n\n")[:4]
        kinds = [KINDS[(i + k) % len(KINDS)] for k in range(3)]
        # list texts come from other articles than the paragraphs, so that they count only where kept
        planted = {kind: planted_block(kind, rng, articles[(i + 7 + k) % len(articles)])
                   for k, kind in enumerate(kinds)}
        title = paragraphs[0][:40]
        page = doc_page(title, _article(title, paragraphs, [b for b, _ in planted.values()], rng), i % 4)
        article = "\n".join([title, *paragraphs, *(u for _, units in planted.values() for u in units)])
        corpus.append({"html": page, "article": article, "units": {k: units for k, (_, units) in planted.items()}})
    return corpus


def _key(text: str) -> str:
    return re.sub(r"\s+", "", text)


def score(texts: list[str], corpus: list[dict]) -> dict:
    """Items kept (overall and per kind), navigation leak, F1 against the planted article."""
    kept = {kind: [0, 0] for kind in KINDS}
    leaks = 0
    labels = [label for group in NAV.values() for label in group]
    for text, page in zip(texts, corpus):
        key = _key(text)
        for kind, units in page["units"].items():
            kept[kind][0] += sum(_key(u) in key for u in units)
            kept[kind][1] += len(units)
        leaks += any(label in text for label in labels)
    result = {f"kept:{kind}": k / n for kind, (k, n) in kept.items() if n}
    result["items_kept"] = sum(k for k, _ in kept.values()) / sum(n for _, n in kept.values())
    result["nav_leak"] = leaks / len(corpus)
    result["f1_article"] = sum(f1(t, p["article"]) for t, p in zip(texts, corpus)) / len(corpus)
    return result


def run_interleaved(configs, pages: list[tuple[str, str]], rounds: int) -> dict[str, tuple[list[str], float]]:
    """{label: (texts, best CPU seconds)}: every config once per round, so that the machine's load
    drifts over all of them alike."""
    best = {label: (None, float("inf")) for label, _ in configs}
    for _ in range(rounds):
        for label, params in configs:
            texts, seconds = run_backend(params, pages, 1)
            best[label] = (texts, min(best[label][1], seconds))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=300, help="generated documentation pages")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (best is kept)")
    args = parser.parse_args()
    corpus = doc_corpus(args.pages)
    pages = [(p["html"], p["article"]) for p in corpus]
    results, rows, kind_rows = {}, [], []
    for label, (texts, seconds) in run_interleaved(CONFIGS, pages, args.rounds).items():
        r = results[label] = {"docs_per_s": len(pages) / seconds, **score(texts, corpus)}
        rows.append([label, len(pages), round(r["docs_per_s"]), round(r["items_kept"], 3), round(r["nav_leak"], 3),
                     round(r["f1_article"], 3)])
        kind_rows.append([label] + [round(r[f"kept:{kind}"], 2) for kind in KINDS])
    print_table(f"documentation pages (CPU s, best of {args.rounds}, interleaved)",
                ["extract", "pages", "docs/s", "items kept", "nav leak", "F1 article"], rows)
    print_table("items kept, by kind", ["extract", *KINDS], kind_rows)
    other = []
    for corpus_name, other_pages in corpora(args.pages).items():
        for label, (texts, seconds) in run_interleaved(CONFIGS[:4], other_pages, args.rounds).items():
            r = results[f"{corpus_name}/{label}"] = {
                "docs_per_s": len(other_pages) / seconds,
                "f1_article": sum(f1(t, ref) for t, (_, ref) in zip(texts, other_pages)) / len(other_pages),
                "leak": sum(any(m in t for m in MARKERS) for t in texts) / len(other_pages)}
            other.append([corpus_name, label, len(other_pages), round(r["docs_per_s"]), round(r["f1_article"], 3),
                          round(r["leak"], 3)])
    print_table("benchmarks/extract.py corpora", ["pages", "extract", "n", "docs/s", "F1 article", "leak"], other)
    emit_json("extract_lists", {k: {m: round(v, 4) for m, v in r.items()} for k, r in results.items()})


if __name__ == "__main__":
    main()
