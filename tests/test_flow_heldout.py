"""`eval.heldout` keeps held-out text out of training in every source: a flow over a site (with
near-copies of its own pages) and a crawl carrying copies and near-copies of every page trains on no
13-gram of a held-out document, and its report and log count what was cut."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from flow_fixtures import PIPELINE, TINY, run_main, stages_in_process, write_page, write_site
from trident.data.indexed import IndexedDataset
from trident.data.tokenizer import Tokenizer
from trident.text.ngrams import words_of

N = 13  # the decontamination rule's n-gram


def _near_copy(text: str, i: int) -> str:
    """The text with a sentence added before it, one word changed and its last paragraph dropped."""
    paragraphs = [p for p in text.split("\n") if p.strip()]
    body = "\n".join(paragraphs[:-1] if len(paragraphs) > 2 else paragraphs)
    return f"Mirrored copy number {i} of an archived page.\n" + re.sub(r"\bthe\b", "a", body, count=1)


def _corpus(root: Path) -> None:
    """ROOT/site: 24 pages and a near-copy of each of the first 12; ROOT/crawl.jsonl: a copy and a near-copy
    of each of the 24 pages, between unrelated filler documents."""
    texts = write_site(root)
    for i, text in enumerate(texts[:12]):
        write_page(root / "site" / f"near{i:02d}.html", f"Page {i} (mirror)", _near_copy(text, i))
    filler = [" ".join(f"filler{(i * 37 + j) % 997} line" for j in range(80)) for i in range(8)]
    records = [*filler[:4], *texts, *(_near_copy(t, i + 100) for i, t in enumerate(texts)), *filler[4:]]
    (root / "crawl.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in records))


def _grams(text: str) -> set[tuple[str, ...]]:
    words = words_of(text)
    return {tuple(words[i:i + N]) for i in range(len(words) - N + 1)}


def _tokenized_texts(out: Path, name: str) -> list[str]:
    tokenizer, data = Tokenizer.load(out / "tokenizer.json"), IndexedDataset(out / "data" / name)
    return [tokenizer.decode(data[i].tolist()) for i in range(len(data))]


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("leak")
    _corpus(root)
    crawl = {"name": "crawl", "paths": "crawl.jsonl", "curate": {"config": {"stages": [{"stage": "clean"}]}}}
    flow = {"sources": [{"name": "docs", "paths": "site/*.html"}, crawl],
            "curate": {"config": PIPELINE}, "tokenizer": {"vocab_size": 300},
            "train": {"config": "tiny", "overrides": TINY},
            "eval": {"tasks": ["lambada"], "shots": [0], "heldout": {"source": "docs", "every": 3, "n_examples": 4}},
            "sample": {"max_new_tokens": 4}}
    (root / "flow.yaml").write_text(yaml.safe_dump(flow))
    out = root / "out"
    with pytest.MonkeyPatch.context() as mp, stages_in_process(mp):
        run = run_main(["run", str(root / "flow.yaml"), "--out", str(out), "--json"])
    return out, run


def test_no_held_out_13_gram_reaches_the_tokenized_data_of_any_source(leak_run):
    from trident.curate.read.shards import read_shard

    out, run = leak_run
    assert run["code"] == 0, run["err"]
    held = [json.loads(line)["text"] for line in (out / "heldout" / "documents.jsonl").read_text().splitlines()]
    assert len(held) >= 4
    held_grams = set().union(*map(_grams, held))
    for name in ("docs", "crawl"):
        curated = [d.text for s in sorted((out / "curated" / name).glob("shard-*")) for d in read_shard(s)]
        leaking = [t for t in curated if _grams(t) & held_grams]  # what trained before: copies, near-copies
        assert len(leaking) >= (len(held) if name == "crawl" else 1), name
        tokenized = _tokenized_texts(out, name)
        assert len(tokenized) > 4 and not [t for t in tokenized if _grams(t) & held_grams], name


def test_the_report_and_log_count_what_held_out_decontamination_removed(leak_run):
    out, run = leak_run
    ran = json.loads(run["out"].strip().splitlines()[-1])["ran"]
    assert ran[:4] == ["curate:docs", "heldout", "curate:crawl", "decontaminate:docs"]
    assert ran[4:7] == ["decontaminate:crawl", "tokenizer", "tokenize:docs"]
    stats = json.loads((out / "decontaminated" / "crawl" / "stats.json").read_text())
    counters = next(s["counters"] for s in stats["stages"] if s["name"] == "decontaminate")
    touched = counters["touched:heldout"]
    assert touched >= 16 and counters["documents_cleaned"] + counters.get("dropped:contaminated", 0) + \
        counters.get("dropped:too_many_splits", 0) == touched and counters["cuts"] >= touched
    assert counters["out"] >= 8  # the filler and the pages not held out are trained on
    assert f"crawl: {touched} of {counters['in']} documents held held-out 13-grams" in run["out"]
    report = (out / "report.md").read_text()
    assert "## Held-out text kept out of training" in report
    assert f"| crawl | {counters['in']} | {touched} | {counters['documents_cleaned']} | {counters['cuts']} |" in report
