"""The embedded demo corpus: standard-library docstrings, deterministic, with skipped modules counted."""
import json

import pytest

from trident.data.stdlib_corpus import SKIP_MODULES, build_stdlib_corpus, stdlib_module_names
from trident.text.jsonl import iter_jsonl


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.timeout(120)
def test_full_corpus_is_deterministic_and_sizeable(tmp_path):
    n = build_stdlib_corpus(tmp_path / "a.jsonl")
    docs = read(tmp_path / "a.jsonl")
    assert n == len(docs) > 500
    total = sum(len(d["text"]) for d in docs)
    assert total > 1_000_000  # ~2 MB on CPython 3.11
    sources = {d["source"] for d in docs}
    assert {"json", "collections", "email.message"} <= sources
    assert any(s.startswith("pydoc_data.topics:") for s in sources)
    assert not sources & SKIP_MODULES
    assert all(d["text"].strip() for d in docs)
    # the reader the tokenizer uses accepts every line
    assert all(r.text is not None for r in iter_jsonl(tmp_path / "a.jsonl"))
    stats = json.loads((tmp_path / "a.jsonl.stats.json").read_text())
    assert stats["documents"] == n and stats["characters"] == total
    assert stats["failed_import_count"] == len(stats["failed_imports"])
    assert stats["modules"] + stats["failed_import_count"] >= len(stdlib_module_names())
    # a second build (this process has imported torch, which patches stdlib functions) is the
    # same text: max_docs gives exactly the first documents of the full corpus
    assert build_stdlib_corpus(tmp_path / "b.jsonl", max_docs=300) == 300
    full = (tmp_path / "a.jsonl").read_bytes().splitlines(keepends=True)
    assert (tmp_path / "b.jsonl").read_bytes() == b"".join(full[:300])


def test_module_list_excludes_side_effect_modules():
    names = stdlib_module_names()
    assert names == sorted(names)
    assert "antigravity" not in names and "this" not in names
    assert not any(n.split(".")[0] in {"idlelib", "tkinter", "test"} for n in names)
    assert not any(part.startswith("_") for n in names for part in n.split("."))
