"""site_lines' template shapes on compact reproductions of real documentation templates (the
PostgreSQL manual's DocBook navigation, a texinfo manual's header, a Sphinx module page), and the
site of local files. The real pages these copy are measured by benchmarks/curate_real_sites.py."""
import random
import re

import pytest

from trident.curate.document import Document
from trident.curate.filters.site_lines import site_name
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor
from trident.curate.run.registry import build_stage

pytestmark = pytest.mark.timeout(60)

VOCABULARY = ("table index query column value row schema type function server client option file "
              "setting user role lock page cache plan scan join order group limit offset view "
              "trigger rule domain cast operator").split()
STOP = "the a of to in is and for with by that".split()
NAV = re.compile(r"^(Prev\s|Next:|Previous:)|\sHome(\s|$)")


def prose(rng: random.Random, lines: int) -> list[str]:
    """Sentences of a technical manual: its own words and the common ones, each line ending in '.'."""
    return [" ".join(rng.choice(VOCABULARY + STOP) for _ in range(rng.randint(8, 20))).capitalize() + "."
            for _ in range(lines)]


def docbook_pages(rng: random.Random, n: int = 14) -> list[Document]:
    """PostgreSQL's manual: the title row, then Prev Up <chapter> Home Next; at the foot Prev Up Next
    and <previous page title> Home <next page title>."""
    chapters = ["Chapter 37. The Information Schema", "SQL Commands", "Part III. Server Administration"]
    titles = [f"37.{i}. {rng.choice(VOCABULARY)}_{rng.choice(VOCABULARY)}" for i in range(n + 2)]
    return [Document(f"pg{i}", "\n".join([titles[i + 1], f"Prev \t\tUp\t\t{chapters[i % 3]}\t\tHome\t\t Next",
                                          *prose(rng, 8), "Prev \t\tUp\t\t Next",
                                          f"{titles[i]} \t\tHome\t\t {titles[i + 2]}"]),
                     meta={"url": f"https://www.postgresql.org/docs/{i}.html"}) for i in range(n)]


def texinfo_pages(rng: random.Random, n: int = 14) -> list[Document]:
    """A texinfo manual: Next: <title>, Previous: <title>, Up: <chapter> [Index] at the top (link texts
    lost) and the foot; a chapter's last page has no Next."""
    titles = [f"{rng.choice(VOCABULARY).title()} {rng.choice(VOCABULARY).title()} Functions" for _ in range(n + 2)]
    docs = []
    for i in range(n):
        nav = f"Next: {titles[i + 2]}, " if i % 5 != 4 else ""
        up = ("MPFR Interface", "API Compatibility")[i % 2]
        docs.append(Document(f"mp{i}", "\n".join([f"{'Next: , ' if nav else ''}Previous: , Up: {up} \xa0 [Index]",
                                                  f"5.{i} {titles[i + 1]}", *prose(rng, 8),
                                                  f"{nav}Previous: {titles[i]}, Up: {up} \xa0 [Index]"]),
                             meta={"url": f"https://www.mpfr.org/{i}.html"}))
    return docs


def sphinx_pages(rng: random.Random, n: int = 14) -> list[Document]:
    """Python's library reference: no navigation left by extraction; a module title, "Source code:
    <path>", a "Note", version notes at the end: article text, all of it."""
    docs = []
    for i in range(n):
        name = f"{rng.choice(VOCABULARY)}{i}"
        lines = [f"{name} — {rng.choice(VOCABULARY)} {rng.choice(VOCABULARY)} support", f"Source code: Lib/{name}.py",
                 "Note", *prose(rng, 8), f"Changed in version 3.{i % 4}: Added the {rng.choice(VOCABULARY)} parameter."]
        docs.append(Document(f"py{i}", "\n".join(lines), meta={"url": f"https://docs.python.org/library/{name}.html"}))
    return docs


def run_stage(docs, folder, **params):
    write_shard(folder / "in.jsonl.zst", docs)
    stage = build_stage("site_lines", {"partitions": 2, **params})
    outputs = stage.run([folder / "in.jsonl.zst"], folder / "out", LocalExecutor(1, progress=False))
    return stage, {doc.id: doc.text for doc in read_shard(outputs[0])}


@pytest.fixture(scope="module")
def pages():
    rng = random.Random(0)
    return docbook_pages(rng) + texinfo_pages(rng) + sphinx_pages(rng)


def nav_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if NAV.search(line)]


def test_navigation_with_titles_removed_article_text_kept(pages, tmp_path):
    stage, out = run_stage(pages, tmp_path / "shapes")
    by_id = {doc.id: doc.text for doc in pages}
    for doc_id, text in out.items():
        assert nav_lines(text) == [], (doc_id, text)
        source = by_id[doc_id].split("\n")
        kept = [line for line in source if not NAV.search(line)]
        assert text.split("\n") == kept, doc_id  # every other line, the page title included, kept in place
    assert set(out) == set(by_id) and stage.counters["template_shapes"] >= 4
    assert all(out[doc.id] == doc.text for doc in pages if doc.id.startswith("py"))  # its "Note" lines stay too


def test_exact_lines_alone_leave_the_navigation(pages, tmp_path):
    """The stage before shapes (shapes: false) keeps a title-carrying navigation line on every page."""
    stage, out = run_stage(pages, tmp_path / "exact", shapes=False)
    assert sum(bool(nav_lines(out[doc.id])) for doc in pages if doc.id.startswith(("pg", "mp"))) == 28
    assert stage.counters["template_shapes"] == 0


def test_local_files_are_sites_by_folder(pages, tmp_path):
    assert site_name("file:///usr/share/doc/pg/html/sql-select.html") == "file:/usr/share/doc/pg/html"
    assert site_name("/srv/docs/a/b.html") == "file:/srv/docs/a"
    assert site_name("https://www.Example.org/a/b.html") == "example.org" and site_name("example.org/x") is None
    local = [Document(doc.id, doc.text, {"url": f"file:///usr/share/doc/{doc.id[:2]}/html/{doc.id}.html"})
             for doc in pages]
    stage, out = run_stage(local, tmp_path / "files")
    assert stage.counters["no_url"] == 0 and stage.counters["hosts"] == 3
    assert all(nav_lines(text) == [] for text in out.values())
