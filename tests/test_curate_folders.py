"""Folders of pages as users bring them (issue 60 items 1-3): ids that name their file, other files
skipped and counted, glob patterns, extraction linear in the page, `curate why` and `data remove`
finding exactly one document."""
import json
import time

import pytest

from trident.cli import main
from trident.curate.extract.html import Extract
from trident.curate.document import Document
from trident.curate.read.shards import MIN_GROUP_BYTES, coalesce_inputs, read_shard
from trident.curate.samples.doc_tree import reference_page, write_doc_tree

@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    (root / "extract.yaml").write_text("- {stage: extract}\n")
    CONFIG[1] = str(root / "extract.yaml")
    return root / "share", write_doc_tree(root / "share")


CONFIG = ["curate", "extract.yaml"]  # the pipeline: extraction alone (its path set by `tree`)


def _ids(out):
    return [doc.id for shard in sorted(out.glob("shard-*.jsonl.zst")) for doc in read_shard(shard)]


def test_a_folder_keeps_every_page_under_its_own_path_and_counts_the_rest(tree, tmp_path, capsys):
    root, made = tree
    out = tmp_path / "out"
    assert main([*CONFIG, "--input", str(root), "--out", str(out), "progress=false"]) == 0
    printed = capsys.readouterr().out
    assert "skipped: 9 .png, 1 .gz, 1 no suffix" in printed  # never an error
    ids = _ids(out)
    assert sorted(ids) == made["pages"] and len(set(ids)) == len(ids)  # en-US/index.html, de-DE/index.html...
    assert all((root / doc_id).is_file() for doc_id in ids)  # each names its file
    stats = json.loads((out / "stats.json").read_text())
    assert stats["skipped_files"] == made["skipped"] and stats["stages"][0]["counters"]["in"] == len(ids)
    assert "Skipped input files: 9 .png, 1 .gz, 1 no suffix" in (out / "report.md").read_text()

    assert main(["curate", "why", str(out), "de-DE/index.html", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found["kept"]) == 1 and found["kept"][0]["id"] == "de-DE/index.html" and not found["dropped"]
    rerun = tmp_path / "again"  # stable across reruns
    assert main([*CONFIG, "--input", str(root), "--out", str(rerun), "progress=false"]) == 0
    assert _ids(rerun) == ids


def test_data_remove_takes_out_exactly_the_page_its_id_names(tree, tmp_path, capsys):
    from trident.data.build import tokenize_files
    from trident.data.tokenizer import train_tokenizer

    root, made = tree
    out = tmp_path / "out"
    assert main([*CONFIG, "--input", str(root / "*-*"), "--out", str(out), "progress=false"]) == 0
    shards = sorted(out.glob("shard-*.jsonl.zst"))
    texts = [doc.text for shard in shards for doc in read_shard(shard)]
    (tmp_path / "train.txt").write_text("\n".join(texts[:3]))
    train_tokenizer([tmp_path / "train.txt"], 300, tmp_path / "tok")
    tokenize_files(shards, tmp_path / "data", tmp_path / "tok" / "tokenizer.json", progress=False)
    (tmp_path / "ids.txt").write_text("nl-NL/guide.html\n")
    capsys.readouterr()
    assert main(["data", "remove", "--prefix", str(tmp_path / "data"), "--ids", str(tmp_path / "ids.txt"),
                 "--out", str(tmp_path / "data-v2"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents_removed"] == 1 and report["not_found"] == 0
    assert report["documents"] == len(made["pages"]) - 1
    kept = [json.loads(line)["id"] for line in (tmp_path / "data-v2.doc_ids.jsonl").read_text().splitlines()]
    assert "nl-NL/guide.html" not in kept and "en-US/guide.html" in kept and "de-DE/guide.html" in kept


def test_glob_patterns_are_expanded_by_trident_and_one_matching_nothing_exits_2(tree, tmp_path, capsys):
    root, made = tree
    out = tmp_path / "out"
    assert main([*CONFIG, "--input", f"{root}/**/index.html", "--out", str(out), "progress=false"]) == 0
    assert sorted(_ids(out)) == [p for p in made["pages"] if p.endswith("/index.html")]
    capsys.readouterr()
    assert main([*CONFIG, "--input", f"{root}/*.nothing", "--out", str(tmp_path / "no"), "progress=false"]) == 2
    assert f"input pattern '{root}/*.nothing' matches no file" in capsys.readouterr().err


def test_a_600_kb_page_with_thousands_of_list_items_extracts_in_under_a_second():
    html = reference_page(sections=620, items=6)
    assert len(html) > 600_000 and html.count("<li>") == 3720
    stage = Extract()
    stage.setup()
    doc = Document("reference.html", html, {"content_type": "text/html", "url": "file:///reference.html"})
    start = time.process_time()
    text = stage.apply(doc).text
    spent = time.process_time() - start
    assert text.count("• ") == 3720  # every item put back (resiliparse drops lists right under <body>)
    assert spent < 1.0, f"{spent:.2f} s of CPU"  # was 36 s: the list post-pass was quadratic


def test_one_folder_is_split_into_groups_for_every_worker():
    files = [(f"page{i}.html", "web") for i in range(200)]
    groups = coalesce_inputs(files, [200_000] * 200, 32 << 20)  # 40 MB of pages: one 32 MB group before
    assert len(groups) >= 32 and sum(map(len, groups)) == 200
    small = coalesce_inputs(files[:10], [1000] * 10, 32 << 20)  # a few KB stay one group
    assert len(small) == 1 and MIN_GROUP_BYTES > 10_000


def test_workers_take_the_largest_inputs_first(tmp_path):
    from trident.curate.run.phases import largest_first

    for name, size in (("a.html", 10), ("big.html", 5000), ("b.html", 20), ("c.html", 30)):
        (tmp_path / name).write_text("x" * size)
    tasks = [{"input": str(tmp_path / "a.html"), "group": None},
             {"input": str(tmp_path / "b.html"), "group": [(str(tmp_path / "b.html"), None), (str(tmp_path / "c.html"), None)]},
             {"input": "s3://bucket/remote.html", "group": None},
             {"input": str(tmp_path / "big.html"), "group": None}]
    assert largest_first(tasks) == [3, 1, 0, 2]  # a group counts all its files; remote: 0, keeps its place


MAN_PAGE = """<html><body class="manpage"><div id="header"><h1>git-add(1) Manual Page</h1><h2>NAME</h2>
<div class="sectionbody"><p>git-add - Add file contents to the index</p></div></div>
<div id="content"><div class="sect1"><h2 id="_description">DESCRIPTION</h2><div class="sectionbody">
<p>This command updates the index using the current content found in the working tree, to prepare the content
staged for the next commit. It typically adds the current content of existing paths as a whole.</p>
<p>The index holds a snapshot of the content of the working tree, and it is this snapshot that is taken as the
contents of the next commit. Thus after making any changes to the working tree you must add them.</p>
</div></div></div></body></html>"""


def _extract(html):
    stage = Extract()
    stage.setup()
    return stage.apply(Document("p.html", html, {"content_type": "text/html", "url": "file:///p.html"})).text


def test_a_man_page_keeps_its_title_name_and_one_line_summary():
    lines = _extract(MAN_PAGE).split("\n\n")
    assert lines[:3] == ["git-add(1) Manual Page", "NAME", "git-add - Add file contents to the index"]
    site = MAN_PAGE.replace('<div class="sectionbody"><p>git-add', '<ul><li><a href="/">Home</a></li></ul>'
                                                                   '<div class="sectionbody"><p>git-add')
    assert "NAME" not in _extract(site)  # a header with links is a site's header: still chrome


def test_a_text_index_of_lines_answers_in_as_the_text_does(monkeypatch):
    """``in`` answers from the lines' keys (each line without white space, and without its first
    character) once the index is built: what is in the text, and nothing else, is found."""
    import random

    from trident.curate.extract import text_index

    monkeypatch.setattr(text_index, "_PLAIN_SCANS", 0)
    monkeypatch.setattr(text_index, "_INDEXED_CHARS", 0)
    rng = random.Random(2)
    for _ in range(100):
        lines = ["".join(rng.choice("ab •\t中") for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 30))]
        text = "\n".join(lines)
        squeezed = "".join(text.split())
        index = text_index.TextIndex.of_lines(text)
        needles = ["".join(line.split()) for line in lines] + ["".join(line.split())[1:] + "x" for line in lines]
        needles += ["".join(rng.choice("ab•中") for _ in range(rng.randint(1, 20))) for _ in range(20)]
        assert index.text == squeezed
        assert [needle in index for needle in needles] == [needle in squeezed for needle in needles], text


def test_the_text_index_finds_what_str_find_finds(monkeypatch):
    import random

    from trident.curate.extract import text_index

    monkeypatch.setattr(text_index, "_PLAIN_SCANS", 0)  # the index from the first look-up
    monkeypatch.setattr(text_index, "_INDEXED_CHARS", 0)
    rng = random.Random(1)
    for trial in range(200):
        alphabet = "ab" if trial % 2 else "abcdefgé中"
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        index = text_index.TextIndex(text)
        for _ in range(20):
            start = rng.randint(0, max(len(text) - 1, 0))
            needle = text[start:start + rng.randint(1, 40)] if rng.random() < 0.5 else \
                "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
            assert index.find(needle) == text.find(needle), (text, needle)
