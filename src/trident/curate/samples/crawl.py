"""A realistic small Common Crawl-like WARC, built offline from the Python language reference
(pydoc_data.topics), for tests and `trident demo`.

It holds what a curation pipeline must deal with: HTML pages with navigation, cookie banners and
footers around the article; German and French pages; exact duplicates (same article, other URL
and chrome); near-duplicates (a few words changed); a 404 response; non-HTML responses (PDF,
PNG); spam pages (repeated lines) and tiny pages; plus warcinfo and request records.
"""
from __future__ import annotations

import html
import io
import random
import re
from pathlib import Path

from trident.curate.document import CurateError

GERMAN = [
    "Die Stadt liegt an einem breiten Fluss, der im Frühjahr oft über die Ufer tritt. Die Bewohner "
    "haben deshalb schon vor langer Zeit hohe Deiche gebaut und pflegen sie jedes Jahr mit großer "
    "Sorgfalt. Im Sommer kommen viele Besucher, um am Wasser spazieren zu gehen, in den kleinen Cafés "
    "zu sitzen und die alten Häuser der Altstadt zu besichtigen.",
    "Der Gemeinderat hat beschlossen, die Bibliothek zu erweitern und länger zu öffnen. Schülerinnen "
    "und Schüler sollen dort nach dem Unterricht lernen können, und am Wochenende werden Lesungen für "
    "Kinder und Erwachsene angeboten. Die Kosten werden zum Teil vom Land getragen, der Rest wird "
    "über mehrere Jahre aus dem Haushalt der Gemeinde bezahlt.",
    "Wer mit dem Zug anreist, erreicht das Zentrum in wenigen Minuten zu Fuß. Vom Bahnhof führt eine "
    "ruhige Straße mit Bäumen an der Kirche vorbei bis zum Marktplatz, auf dem zweimal in der Woche "
    "frisches Obst, Gemüse, Brot und Käse aus der Umgebung verkauft werden.",
]
FRENCH = [
    "La ville se trouve au bord d'une large rivière qui déborde souvent au printemps. Les habitants "
    "ont donc construit depuis longtemps de hautes digues et les entretiennent chaque année avec "
    "beaucoup de soin. En été, de nombreux visiteurs viennent se promener le long de l'eau, s'asseoir "
    "dans les petits cafés et visiter les vieilles maisons du centre historique.",
    "Le conseil municipal a décidé d'agrandir la bibliothèque et d'allonger ses horaires d'ouverture. "
    "Les élèves pourront y travailler après les cours, et des lectures pour les enfants et les adultes "
    "seront proposées le week-end. Les coûts seront en partie pris en charge par la région, le reste "
    "sera payé sur plusieurs années par le budget de la commune.",
    "Ceux qui arrivent en train rejoignent le centre en quelques minutes à pied. Depuis la gare, une "
    "rue calme bordée d'arbres passe devant l'église jusqu'à la place du marché, où l'on vend deux "
    "fois par semaine des fruits, des légumes, du pain et du fromage de la région.",
]
SPAM_LINE = "Buy cheap watches online best price free shipping click here now"
_CHROME = [
    ("Home", "Docs", "Blog", "About us", "Contact"),
    ("Start", "Tutorials", "Reference", "Community", "Download"),
]


def reference_articles(min_words: int = 180, max_words: int = 400) -> list[str]:
    """Prose articles cut from the language reference: paragraphs of one topic joined until
    `min_words`; code blocks and heading underlines removed. Fixed order for a Python version."""
    from pydoc_data.topics import topics

    articles = []
    for key in sorted(topics):
        current: list[str] = []
        for block in re.split(r"\n\s*\n", topics[key]):
            lines = block.split("\n")
            if block.startswith(" ") or all(set(line.strip()) <= set("*=-") for line in lines[1:2] if line):
                continue  # code example or heading
            paragraph = " ".join(line.strip() for line in lines)
            if len(paragraph.split()) < 8:
                continue
            current.append(paragraph)
            if sum(len(p.split()) for p in current) >= min_words:
                articles.append("\n\n".join(current)[: max_words * 8])
                current = []
    return articles


def render_page(title: str, paragraphs: list[str], chrome: int, url: str) -> str:
    """An HTML page: menu, cookie banner, article, sidebar links and footer around the text."""
    menu = " | ".join(f'<a href="/{item.lower().replace(" ", "-")}">{item}</a>' for item in _CHROME[chrome])
    body = "\n".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<script>window.analytics = {{track: function() {{}}}};</script></head>
<body><header><nav class="menu">{menu}</nav></header>
<div class="cookie-banner">This website uses cookies to improve your experience. <a href="/privacy">Privacy policy</a></div>
<main><article><h1>{html.escape(title)}</h1>
{body}
</article></main>
<aside><h3>Related</h3><ul><li><a href="/a">Popular posts</a></li><li><a href="/b">Archive</a></li></ul></aside>
<footer>Copyright 2024 Example Media. All rights reserved. <a href="/terms">Terms of use</a> | <a href="{url}">Permalink</a></footer>
</body></html>"""


def _near_duplicate(text: str, rng: random.Random, fraction: float = 0.03) -> str:
    words = text.split(" ")
    for index in rng.sample(range(len(words)), max(1, int(len(words) * fraction))):
        words[index] = rng.choice(["often", "usually", "simply", "also", "then"])
    return " ".join(words)


def sample_pages(n_docs: int, seed: int = 0) -> list[dict]:
    """The page list of write_sample_warc: dicts with url, status, content_type, body (bytes), kind."""
    articles = reference_articles()
    if n_docs > len(articles):
        raise CurateError(f"sample WARC: at most {len(articles)} distinct articles available, asked {n_docs}")
    rng = random.Random(seed)
    chosen = rng.sample(articles, n_docs)
    pages = []

    def add(kind: str, path: str, paragraphs: list[str] | None = None, chrome: int = 0, status: int = 200,
            content_type: str = "text/html; charset=utf-8", body: bytes | None = None) -> None:
        url = f"https://www.example-{len(pages) % 7}.org/{path}"
        if body is None:
            body = render_page(paragraphs[0].split(".")[0][:60], paragraphs, chrome, url).encode("utf-8")
        pages.append({"url": url, "status": status, "content_type": content_type, "body": body, "kind": kind})

    for i, article in enumerate(chosen):
        add("english", f"docs/{i}", article.split("\n\n"), chrome=i % 2)
    for i in range(max(1, n_docs // 10)):
        add("exact_duplicate", f"mirror/{i}", chosen[i].split("\n\n"), chrome=(i + 1) % 2)
        add("near_duplicate", f"copy/{i}", _near_duplicate(chosen[-1 - i], rng).split("\n\n"))
    for i in range(max(1, n_docs // 20)):
        add("german", f"de/{i}", GERMAN[i % 3:] + GERMAN[: i % 3])
        add("french", f"fr/{i}", FRENCH[i % 3:] + FRENCH[: i % 3])
        add("spam", f"deals/{i}", [f"{SPAM_LINE}." for _ in range(40)])
        add("short", f"news/{i}", ["Short update: the page has moved to a new address."])
    add("not_found", "missing", status=404, body=b"<html><body><h1>404 Not Found</h1></body></html>")
    add("non_html", "paper.pdf", content_type="application/pdf", body=b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n")
    add("non_html", "logo.png", content_type="image/png", body=b"\x89PNG\r\n\x1a\n" + bytes(range(64)))
    rng.shuffle(pages)
    return pages


def write_sample_warc(path: Path | str, n_docs: int = 40, seed: int = 0) -> dict:
    """Write a WARC (gzipped when the name ends in .gz) of `n_docs` distinct English articles plus
    the planted pages described above. Returns {kind: count} of the response records written.
    The same (n_docs, seed) and Python version give the same records (ids and dates included)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pages = sample_pages(n_docs, seed)
    rng = random.Random(seed + 1)
    date = "2021-01-15T12:00:00Z"
    kinds: dict[str, int] = {}
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=path.name.endswith(".gz"))
        info = writer.create_warcinfo_record(path.name, {"software": "trident sample WARC"})
        info.rec_headers.replace_header("WARC-Record-ID", f"<urn:uuid:{_uuid(rng)}>")
        info.rec_headers.replace_header("WARC-Date", date)
        writer.write_record(info)
        for page in pages:
            headers = {"WARC-Record-ID": f"<urn:uuid:{_uuid(rng)}>", "WARC-Date": date}
            request = writer.create_warc_record(
                page["url"], "request", payload=io.BytesIO(b""), warc_headers_dict=dict(headers),
                http_headers=StatusAndHeaders(f"GET /{page['url'].split('/', 3)[3]} HTTP/1.1",
                                              [("Host", page["url"].split("/")[2])], is_http_request=True))
            writer.write_record(request)
            reason = "OK" if page["status"] == 200 else "Not Found"
            http_headers = StatusAndHeaders(f"{page['status']} {reason}", [("Content-Type", page["content_type"])],
                                            protocol="HTTP/1.1")
            headers["WARC-Record-ID"] = f"<urn:uuid:{_uuid(rng)}>"
            response = writer.create_warc_record(page["url"], "response", payload=io.BytesIO(page["body"]),
                                                 warc_headers_dict=headers, http_headers=http_headers)
            writer.write_record(response)
            kinds[page["kind"]] = kinds.get(page["kind"], 0) + 1
    return kinds


def _uuid(rng: random.Random) -> str:
    value = f"{rng.getrandbits(128):032x}"
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"
