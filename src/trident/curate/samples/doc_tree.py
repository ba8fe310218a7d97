"""A documentation folder as users bring one: the same file names in several language folders,
files that are not pages (images, compressed changelogs, a README), and one large reference page
with thousands of list items (sqlite's capi3ref.html is 627 KB). Tests and benchmarks use it."""
from __future__ import annotations

import gzip
import random
from pathlib import Path

LANGUAGES = ("en-US", "de-DE", "nl-NL")
PAGES = ("index.html", "guide.html", "install.html")
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "be", "da", "fe", "gu", "po", "ri", "zu", "an", "el")


def _words(rng: random.Random, count: int) -> str:
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(count))


def _sentence(rng: random.Random, count: int) -> str:
    return _words(rng, count).capitalize() + "."


def page(title: str, seed: int, paragraphs: int = 6) -> str:
    """A small page: a title and paragraphs of made-up words (distinct for every seed)."""
    rng = random.Random(seed)
    body = "".join(f"<p>{_sentence(rng, 40)} {_sentence(rng, 30)}</p>" for _ in range(paragraphs))
    return f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1>{body}</main></body></html>"


def reference_page(sections: int = 620, items: int = 6, seed: int = 0) -> str:
    """A large reference page (about 1 KB a section): a heading, a paragraph, then a list of prose
    items right under <body>, which resiliparse drops and the list post-pass puts back."""
    rng = random.Random(seed)
    parts = ["<html><head><title>Reference</title></head><body><h1>Reference of every function</h1>"]
    for section in range(sections):
        parts.append(f"<h2>Function {section}: {_words(rng, 3)}</h2><p>{_sentence(rng, 40)}</p><ul>")
        parts += [f"<li>{_sentence(rng, 12)} ({section}.{item})</li>" for item in range(items)]
        parts.append(f"</ul><p>{_sentence(rng, 25)}</p>")
    return "".join(parts) + "</body></html>"


def write_doc_tree(root: Path, reference_sections: int = 620) -> dict:
    """Write the folder under `root`; returns {"pages": relative paths of the pages, "skipped": the
    other files by kind, "large": the large page's relative path}."""
    pages = []
    for number, (language, name) in enumerate((lang, name) for lang in LANGUAGES for name in PAGES):
        path = root / language / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page(f"{name[:-5].title()} ({language})", seed=number), encoding="utf-8")
        pages.append(f"{language}/{name}")
        (root / language / "images").mkdir(exist_ok=True)
        (root / language / "images" / f"{name[:-5]}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(16))
    (root / "changelog.Debian.gz").write_bytes(gzip.compress(b"package (1.0) unstable; urgency=low\n"))
    (root / "README").write_text("not a page\n")
    large = "en-US/reference.html"
    (root / large).write_text(reference_page(reference_sections), encoding="utf-8")
    return {"pages": sorted(pages + [large]), "skipped": {".png": len(pages), ".gz": 1, "no suffix": 1},
            "large": large}
