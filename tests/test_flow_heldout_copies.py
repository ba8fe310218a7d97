"""No held-out document's text is trained on however often it was copied, while a phrase many different
documents share stays (issue 58 item 4): the decontaminate stage as a flow with eval.heldout runs it
(flow/heldout_clean.stage) over a source holding 12 near-copies of a held-out page and 12 other
articles that end with the licence line the held-out pages end with."""
import json

from trident.curate.document import Document
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor
from trident.curate.run.registry import build_stage
from trident.curate.samples.crawl import reference_articles
from trident.flow import heldout_clean
from trident.text.ngrams import words_of

LICENCE = ("This article is licensed under the Creative Commons Attribution ShareAlike License, and you may "
           "reuse it provided that you give appropriate credit and share your changes alike.")


def grams(text: str) -> set[tuple[str, ...]]:
    words = words_of(text)
    return {tuple(words[i:i + 13]) for i in range(len(words) - 12)}


def decontaminate(tmp_path, spec: dict) -> tuple[dict, dict, list[str]]:
    articles = reference_articles()
    held = [f"{text}\n{LICENCE}" for text in articles[:3]]
    (tmp_path / "documents.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in held))
    copies = [Document(f"copy{i}", f"Mirror number {i} of an archived page, kept for reference.\n{held[0]}")
              for i in range(12)]
    # other articles (the reference set holds near-copies of some: those would be copies of a held-out page)
    apart = [text for text in articles[3:] if not grams(text) & set().union(*map(grams, held))]
    others = [Document(f"other{i}", f"{text}\n{LICENCE}") for i, text in enumerate(apart[:12])]
    write_shard(tmp_path / "in" / "s0.jsonl.zst", copies + others)
    stage = build_stage("decontaminate", {k: v for k, v in spec.items() if k != "stage"})
    outputs = stage.run([tmp_path / "in" / "s0.jsonl.zst"], tmp_path / "out", LocalExecutor(1, progress=False))
    return stage.counters, {d.id: d.text for p in outputs for d in read_shard(p)}, held


def test_a_held_out_page_copied_twelve_times_is_not_trained_on_while_a_shared_line_stays(tmp_path):
    counters, kept, held = decontaminate(tmp_path, heldout_clean.stage(tmp_path / "documents.jsonl"))
    own = grams(held[0]) - grams(LICENCE)  # the page's own text, its licence line aside
    assert counters["copies_of_task_texts"] == 12
    assert not [name for name, text in kept.items() if grams(text) & own]
    assert counters["frequent_ngrams_ignored"] >= len(grams(LICENCE))
    assert all(LICENCE in kept[f"other{i}"] for i in range(12))  # kept in the articles that are not copies


def test_the_papers_rule_alone_trains_on_a_page_copied_ten_times(tmp_path):
    """Without the copy rule (task decontamination's default), the copies count as 12 documents sharing
    the page's 13-grams: common language, kept: what the held-out flow no longer does."""
    spec = {**heldout_clean.stage(tmp_path / "documents.jsonl"), "copy_share": 0.0, "copy_ngrams": 0}
    counters, kept, held = decontaminate(tmp_path, spec)
    own = grams(held[0]) - grams(LICENCE)
    assert counters["copies_of_task_texts"] == 0
    assert len([name for name, text in kept.items() if grams(text) & own]) == 12
