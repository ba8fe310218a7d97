"""A Common-Crawl-like WARC of any size for the curation benchmarks, with every record's truth in
its URL, so that any pipeline's output can be scored by URL alone.

Unique English articles are drawn from the sentences of the Python language reference (so that two
articles share almost no 5-grams); around them: exact duplicates (same article, other URL and page
layout), near duplicates (3% of the words changed), German and French pages, spam (one paragraph
repeated), tiny pages, 404s and non-HTML responses. URL: https://site-N.example.org/KIND/GROUP/I,
where GROUP is the article a duplicate copies.
"""
from __future__ import annotations

import io
import random
import re
from collections import Counter
from pathlib import Path

from extract import generated_page
from trident.curate.samples.crawl import FRENCH, GERMAN, SPAM_LINE, reference_articles, render_page

# share of the records of each kind (the rest are unique English articles)
MIX = {"exact_duplicate": 0.08, "near_duplicate": 0.08, "german": 0.03, "french": 0.03, "spam": 0.02,
       "short": 0.03, "not_found": 0.01, "non_html": 0.02}
ENGLISH_KINDS = ("english", "exact_duplicate", "near_duplicate")


def sentence_pool() -> list[str]:
    sentences = [s for article in reference_articles() for s in re.split(r"(?<=[.!?]) ", article.replace("\n\n", " "))]
    return sorted({s for s in sentences if len(s.split()) >= 6})


def article(rng: random.Random, pool: list[str]) -> list[str]:
    """3-5 paragraphs of 3-5 random sentences (~200-450 words)."""
    return [" ".join(rng.sample(pool, rng.randint(3, 5))) for _ in range(rng.randint(3, 5))]


def near_copy(paragraphs: list[str], rng: random.Random) -> list[str]:
    words = " \n".join(paragraphs).split(" ")
    for index in rng.sample(range(len(words)), max(1, len(words) * 3 // 100)):
        words[index] = rng.choice(["often", "usually", "simply", "also", "then"])
    return " ".join(words).split(" \n")


def page_html(paragraphs: list[str], index: int, rng: random.Random, url: str) -> str:
    """One of five layouts: the sample WARC's two, and benchmarks/extract.py's three."""
    layout = index % 5
    title = paragraphs[0][:50]
    return render_page(title, paragraphs, layout, url) if layout < 2 else generated_page(title, paragraphs, layout - 2, rng)


def plan(records: int, seed: int) -> list[tuple[str, int]]:
    """[(kind, group)] for `records` records; duplicates point at earlier English groups."""
    rng = random.Random(seed)
    counts = {kind: max(1, round(records * share)) for kind, share in MIX.items()}
    english = records - sum(counts.values())
    items = [("english", g) for g in range(english)]
    for kind, count in counts.items():
        items += [(kind, rng.randrange(english) if kind in ("exact_duplicate", "near_duplicate") else -1)
                  for _ in range(count)]
    rng.shuffle(items)
    return items


def write_corpus_warc(path: Path, records: int = 3000, seed: int = 0) -> Counter:
    """Write the WARC (gzipped) and return {kind: records}."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    rng, pool = random.Random(seed), sentence_pool()
    items = plan(records, seed)
    english = {g: article(random.Random(seed * 1_000_003 + g), pool) for kind, g in items if kind == "english"}
    kinds: Counter = Counter()
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for i, (kind, group) in enumerate(items):
            url = f"https://site-{i % 11}.example.org/{kind}/{group}/{i}"
            status, content_type = 200, "text/html; charset=utf-8"
            if kind == "not_found":
                status, body = 404, b"<html><body><h1>404 Not Found</h1></body></html>"
            elif kind == "non_html":
                content_type, body = "application/pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n" + bytes(range(200))
            else:
                paragraphs = {"english": lambda: english[group], "exact_duplicate": lambda: english[group],
                              "near_duplicate": lambda: near_copy(english[group], rng),
                              "german": lambda: GERMAN[i % 3:] + GERMAN[:i % 3],
                              "french": lambda: FRENCH[i % 3:] + FRENCH[:i % 3],
                              "spam": lambda: [f"{SPAM_LINE}."] * 40,
                              "short": lambda: ["Short update: the page has moved to a new address."]}[kind]()
                body = page_html(paragraphs, i, rng, url).encode("utf-8")
            http = StatusAndHeaders(f"{status} {'OK' if status == 200 else 'Not Found'}",
                                    [("Content-Type", content_type)], protocol="HTTP/1.1")
            headers = {"WARC-Record-ID": f"<urn:uuid:{rng.getrandbits(128):032x}>", "WARC-Date": "2021-01-15T12:00:00Z",
                       "WARC-Identified-Payload-Type": content_type.split(";")[0]}
            writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body),
                                                          warc_headers_dict=headers, http_headers=http))
            kinds[kind] += 1
    return kinds


def score(urls: list[str], kinds: Counter) -> dict:
    """Quality of a pipeline's output, from the URLs of the documents it kept: recall of the unique
    English articles, duplicates left (copies beyond one per article), other pages kept."""
    kept = Counter()
    groups: set[int] = set()
    for url in urls:
        kind, group = url.split("/")[3], int(url.split("/")[4])
        kept[kind] += 1
        if kind in ENGLISH_KINDS:
            groups.add(group)
    english_kept = sum(kept[k] for k in ENGLISH_KINDS)
    return {"documents": len(urls), "english_recall": round(len(groups) / kinds["english"], 4),
            "duplicates_left": english_kept - len(groups),
            "other_kept": len(urls) - english_kept}
