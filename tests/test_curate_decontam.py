"""Decontamination: exact cut spans, short pieces, split limit, frequent n-grams, task sources."""
import json
from pathlib import Path

import numpy as np
import pytest

from trident.curate.decontaminate import Decontaminate, cut_regions
from trident.curate.document import CurateError, Document
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor
from trident.curate.run.registry import build_stage
from trident.text.ngrams import ngram_hashes, word_hashes, words_with_spans

SERIAL = LocalExecutor(1, progress=False)
SECRET = "The quick brown fox jumps over the lazy dog near the old river bank today"  # 15 words


def sentence(tag: str, length: int = 100) -> str:
    """A filler sentence of exactly `length` characters ending in '. '."""
    body = " ".join(f"{tag}{i}" for i in range(40))
    return body[: length - 2].rstrip() .ljust(length - 2, "z") + ". "


def write_task(tmp_path: Path, name: str, texts: list[str]) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"question": t, "label": 1}) + "\n" for t in texts))
    return path


def run_stage(tmp_path: Path, docs: list[Document], **params):
    inputs = [tmp_path / "in" / "s0.jsonl.zst"]
    write_shard(inputs[0], docs)
    stage = build_stage("decontaminate", params)
    outputs = stage.run(inputs, tmp_path / "out", SERIAL)
    kept = {d.id: d for p in outputs for d in read_shard(p)}
    c = stage.counters
    assert c["in"] == c["out"] + sum(v for k, v in c.items() if k.startswith("dropped:"))
    return stage, kept


def test_ngram_hashing_ignores_case_and_punctuation():
    words, starts, ends = words_with_spans("Hello, WORLD!  it's")
    assert words == ["hello", "world", "it", "s"]
    assert starts.tolist() == [0, 7, 15, 18] and ends.tolist() == [5, 12, 17, 19]
    # Offsets come from numpy runs of word characters; they must equal the regex's matches.
    import re

    tricky = "İstanbul’s ΟΔΟΣ—straße\tnaïve (e\u0301) 日本語 x_1 𝄞 ٣٤ end."
    words, starts, ends = words_with_spans(tricky)
    matches = list(re.finditer(r"\w+", tricky))
    assert words == [m.group().lower() for m in matches]
    assert starts.tolist() == [m.start() for m in matches] and ends.tolist() == [m.end() for m in matches]
    a = ngram_hashes(word_hashes(words_with_spans("A b, C d")[0]), 2)
    b = ngram_hashes(word_hashes(words_with_spans("a B c-d")[0]), 2)
    assert a.tolist() == b.tolist() and len(a) == 3
    # The same words at a different n never collide.
    assert not set(ngram_hashes(word_hashes(["a", "b", "c"]), 3).tolist()) & set(a.tolist())


def test_cut_widens_to_sentence_boundaries():
    text = "".join(sentence(f"s{i}x") for i in range(10))  # boundaries at 98, 198, ...
    # Match at [450, 460): left pos 250 -> back to '.' at 198; right pos 660 -> forward to '.' at 698.
    assert cut_regions(text, [(450, 460)], 200) == [(199, 699)]
    assert cut_regions(text, [(100, 110)], 200) == [(0, 399)]  # runs into the start
    assert cut_regions(text, [(450, 460), (700, 705)], 200) == [(199, 999)]  # overlaps merge
    assert cut_regions(text, [(450, 460)], 0) == [(399, 499)]


def test_cuts_exactly_the_right_span(tmp_path):
    before = [sentence(f"b{i}x") for i in range(6)]  # 600 chars
    after = [sentence(f"a{i}x") for i in range(6)]
    planted = "So, " + SECRET.upper() + "! "
    text = "".join(before) + planted + "".join(after)
    task = write_task(tmp_path, "qa", [SECRET])
    stage, kept = run_stage(tmp_path, [Document("d", text, {"dataset": "cc"})], tasks={"qa": str(task)})
    start = text.index("THE QUICK")
    end = start + len(SECRET)
    # Left: the '.' at or before start-200 closes the kept piece; right: the piece starts after
    # the first '.' at or after end+200.
    left_stop = text.rindex(".", 0, start - 200 + 1)
    right_stop = text.index(".", end + 200)
    expected = text[: left_stop + 1].strip() + "\n\n" + text[right_stop + 1 :].strip()
    assert kept["d"].text == expected
    assert "".join(before[:4]).strip() == text[: left_stop + 1].strip()  # 4 sentences survive left
    assert kept["d"].meta["decontaminated_cuts"] == 1 and kept["d"].meta["dataset"] == "cc"
    assert stage.counters["documents_cleaned"] == 1 and stage.counters["touched:qa"] == 1
    assert stage.counters["index_ngrams"] == 3  # 15 words -> three 13-grams


def test_short_pieces_are_dropped_and_all_short_drops_document(tmp_path):
    # "p" ends (at 48) before match-200, so it is a piece of its own, 49 characters long.
    short_left = sentence("p", 50) + sentence("q", 300) + SECRET + ". " + "".join(sentence(f"a{i}x") for i in range(6))
    all_short = sentence("q", 120) + SECRET + ". " + sentence("r", 120)
    task = write_task(tmp_path, "qa", [SECRET])
    stage, kept = run_stage(tmp_path, [Document("s", short_left), Document("t", all_short)],
                            tasks=[{"name": "qa", "path": str(task)}])
    assert "p0" not in kept["s"].text and "q0" not in kept["s"].text and kept["s"].text.startswith("a")
    assert "t" not in kept
    assert stage.counters["pieces_dropped"] == 1  # "t" has no piece: the cut spans all of it
    assert stage.counters["dropped:contaminated"] == 1


def test_documents_split_more_than_max_splits_are_dropped(tmp_path):
    filler = "".join(sentence(f"f{i}x") for i in range(5))  # 500 chars between matches
    ten = filler + "".join(SECRET + ". " + filler for _ in range(10))
    eleven = filler + "".join(SECRET + ". " + filler for _ in range(11))
    task = write_task(tmp_path, "qa", [SECRET])
    stage, kept = run_stage(tmp_path, [Document("ten", ten), Document("eleven", eleven)],
                            tasks={"qa": str(task)})
    assert kept["ten"].meta["decontaminated_cuts"] == 10 and SECRET.lower() not in kept["ten"].text.lower()
    assert "eleven" not in kept and stage.counters["dropped:too_many_splits"] == 1


@pytest.mark.parametrize("copies, cut", [(9, True), (10, False)])
def test_frequent_ngrams_are_ignored(tmp_path, copies, cut):
    docs = [Document(f"d{i}", "".join(sentence(f"x{i}y{j}z") for j in range(6)) + SECRET + ". "
                     + "".join(sentence(f"w{i}y{j}z") for j in range(6))) for i in range(copies)]
    task = write_task(tmp_path, "qa", [SECRET])
    stage, kept = run_stage(tmp_path, docs, tasks={"qa": str(task)})
    assert stage.counters["frequent_ngrams_ignored"] == (0 if cut else 3)
    still_there = sum(SECRET in d.text for d in kept.values())
    assert still_there == (0 if cut else copies)
    assert stage.counters["documents_cleaned"] == (copies if cut else 0)


def test_short_task_texts_use_shorter_ngrams(tmp_path):
    eight = "alpha beta gamma delta epsilon zeta eta theta"
    seven = "one two three four five six seven"
    task = tmp_path / "short.txt"
    task.write_text(eight + "\n" + seven + "\n")
    body = "".join(sentence(f"k{i}x") for i in range(6))
    docs = [Document("eight", body + eight + ". " + body), Document("seven", body + seven + ". " + body)]
    stage, kept = run_stage(tmp_path, docs, tasks={"short": str(task)})
    assert "alpha" not in kept["eight"].text and "one two three" in kept["seven"].text
    assert stage.counters["task_texts_too_short"] == 1 and stage.counters["touched:short"] == 1


def test_per_task_counts_and_clean_documents_untouched(tmp_path):
    other = "completely different words that make up a long enough evaluation sentence here"
    t1, t2 = write_task(tmp_path, "one", [SECRET]), write_task(tmp_path, "two", [other])
    clean = Document("clean", "".join(sentence(f"c{i}x") for i in range(5)), {"k": 1})
    dirty = Document("dirty", "".join(sentence(f"d{i}x") for i in range(5)) + SECRET + ". "
                     + "".join(sentence(f"e{i}x") for i in range(5)))
    stage, kept = run_stage(tmp_path, [clean, dirty], tasks={"one": str(t1), "two": str(t2)})
    assert kept["clean"] == clean
    assert stage.counters["touched:one"] == 1 and stage.counters["touched:two"] == 0
    assert "touched:two" in stage.counters


def test_harness_task_loader(tmp_path):
    piqa = tmp_path / "eval" / "piqa"
    piqa.mkdir(parents=True)
    goal = "How do you keep fresh basil leaves from turning dark brown in the fridge overnight"
    piqa.joinpath("valid.jsonl").write_text(json.dumps({"goal": goal, "sol1": "wrap it", "sol2": "burn it"}) + "\n")
    piqa.joinpath("valid-labels.lst").write_text("0\n")
    doc = Document("d", "".join(sentence(f"h{i}x") for i in range(6)) + goal + "? "
                   + "".join(sentence(f"g{i}x") for i in range(6)))
    stage, kept = run_stage(tmp_path, [doc], tasks=[{"name": "piqa", "harness": True}],
                            data_dir=str(tmp_path / "eval"))
    assert "basil" not in kept["d"].text and stage.counters["touched:piqa"] == 1


def test_bad_task_configuration_is_reported(tmp_path):
    with pytest.raises(CurateError, match="tasks"):
        build_stage("decontaminate", {})
    with pytest.raises(CurateError, match="min_ngram"):
        build_stage("decontaminate", {"tasks": {"x": "x.jsonl"}, "min_ngram": 20})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "fine"}\n{not json\n')
    stage = Decontaminate(tasks={"bad": str(bad)})
    with pytest.raises(CurateError, match="bad.jsonl:2"):
        stage.run([], tmp_path / "out", SERIAL)
    stage = Decontaminate(tasks={"missing": str(tmp_path / "nope.jsonl")})
    with pytest.raises(CurateError, match="nope.jsonl not found"):
        stage.run([], tmp_path / "out", SERIAL)
    stage = Decontaminate(tasks=[{"name": "piqa", "harness": True}], data_dir=str(tmp_path))
    with pytest.raises(CurateError, match="piqa"):
        stage.run([], tmp_path / "out", SERIAL)
    stage = Decontaminate(tasks=[{"name": "no_such_task", "harness": True}], data_dir=str(tmp_path))
    with pytest.raises(CurateError, match="no_such_task"):
        stage.run([], tmp_path / "out", SERIAL)
    with pytest.raises(CurateError, match="fields"):
        build_stage("decontaminate", {"tasks": [{"name": "x", "path": "x.jsonl", "fields": "goal"}]})
    assert np.array_equal(ngram_hashes(np.zeros(3, np.uint64), 5), np.zeros(0, np.uint64))
