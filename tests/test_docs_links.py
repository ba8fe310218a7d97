"""Every relative link in README.md and docs/ resolves: the file exists and, with `#anchor`, a heading
of that file has that anchor (GitHub's rule: lower case, punctuation dropped, spaces as hyphens)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (a repeated heading gets -1, -2, ...)."""
    found: dict[str, int] = {}
    result = set()
    fenced = False
    for line in page.read_text().splitlines():
        fenced = fenced != bool(FENCE.match(line))
        if fenced or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        result.add(slug if slug not in found else f"{slug}-{found[slug]}")
        found[slug] = found.get(slug, 0) + 1
    return result


def links(page: Path):
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fenced = fenced != bool(FENCE.match(line))
        if fenced:
            continue
        for match in LINK.finditer(line):
            yield number, match.group(1) or match.group(2)


def test_every_relative_link_resolves():
    broken = []
    for page in [p for p in PAGES if p.exists()]:
        for number, target in links(page):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no heading with that anchor)")
    assert not broken, "\n".join(broken)
