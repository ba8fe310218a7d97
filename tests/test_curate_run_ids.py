"""Ids unique in a whole run (issue 60 item 1): a WARC URI or a JSONL id repeated in files read by
different read tasks is qualified in the later task's documents (read/run_ids.py), kept and dropped
alike, the same on a rerun, and `curate why` and `data remove` find exactly one document by it."""
import json
import random
import shutil

import pytest

from trident.cli import main
from trident.curate.droplog import read_log
from trident.curate.read.shards import read_shard
from trident.curate.run.pipeline import run_pipeline
from trident.curate.samples.crawl import write_sample_warc

pytestmark = pytest.mark.timeout(60)


def _kept(out) -> list[str]:
    return [doc.id for shard in sorted(out.glob("shard-*.jsonl.zst")) for doc in read_shard(shard)]


def _dropped(out) -> list[dict]:
    return [record for log in sorted(out.glob("drops/*/*.drops.jsonl.zst")) for record in read_log(log)
            if record["stage"] != "read"]


def _why(out, key, capsys) -> dict:
    capsys.readouterr()
    assert main(["curate", "why", str(out), key, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_uri_in_two_warcs_read_by_two_tasks_is_qualified_in_the_second(tmp_path, capsys):
    first, second = tmp_path / "a.warc.gz", tmp_path / "b.warc.gz"
    write_sample_warc(first, 6, seed=0)
    shutil.copy(first, second)  # every URI twice (and every record id: the form names the file then)
    config = {"stages": [{"stage": "extract"}, {"stage": "exact_dedup"}], "shard_bytes": 0, "progress": False}
    stats = run_pipeline(config, [first, second], tmp_path / "out")
    out = tmp_path / "out"
    kept, dropped = _kept(out), _dropped(out)
    every = kept + [record["id"] for record in dropped]
    assert len(every) == len(set(every)) == stats["stages"][0]["counters"]["out"]  # unique in the run
    read = stats["stages"][0]["counters"]
    assert read["ids_qualified"] == read["out"] // 2  # the first file's keep their URIs
    copies = [record for record in dropped if record["stage"] == "exact_dedup"]
    assert copies and all(kept.count(r["kept"]) == 1 for r in copies)  # each names one kept copy
    assert not any(" urn:uuid:" in doc_id for doc_id in kept)  # the second file's copies went, the URIs stay
    non_html = next(r for r in dropped if r["stage"] == "extract" and " urn:uuid:" in r["id"])

    found = _why(out, non_html["id"], capsys)
    assert len(found["dropped"]) == 1 and not found["kept"] and found["dropped"][0]["log"].endswith("00001.drops.jsonl.zst")
    capsys.readouterr()
    assert main(["curate", "why", str(out), non_html["url"]]) == 0  # by URL: both, each named
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and f"dropped as {non_html['id']} by extract" in lines[1]
    found = _why(out, kept[0], capsys)  # a URI as id: one document; its copy's record has the URL only
    assert [doc["id"] for doc in found["kept"]] == [kept[0]] and all(r["id"] != kept[0] for r in found["dropped"])

    run_pipeline(config, [first, second], tmp_path / "again")  # stable across reruns
    assert _kept(tmp_path / "again") == kept and _dropped(tmp_path / "again") == dropped


def _jsonl(path, texts):
    path.write_text("".join(json.dumps({"id": str(i), "text": text}) + "\n" for i, text in enumerate(texts)))


def test_jsonl_ids_repeated_across_tasks_before_a_dedup_that_reads_them_itself(tmp_path, capsys):
    rng = random.Random(0)
    vocabulary = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma".split()
    texts = [" ".join(rng.choice(vocabulary) for _ in range(80)) for _ in range(8)]
    _jsonl(tmp_path / "a.jsonl", texts)
    _jsonl(tmp_path / "b.jsonl", [text + " and then some more words" for text in texts[:4]] +
           [" ".join(rng.choice(vocabulary) for _ in range(80)) for _ in range(4)])  # ids 0-7 again
    config = {"stages": [{"stage": "fuzzy_dedup", "bands": 20, "partitions": 2}], "shard_bytes": 0,
              "progress": False}
    inputs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    out = tmp_path / "out"
    run_pipeline(config, inputs, out)  # the stage reads the inputs itself (GlobalStage.reads_raw)
    kept, dropped = _kept(out), _dropped(out)
    assert sorted(kept + [r["id"] for r in dropped]) == sorted([str(i) for i in range(8)] +
                                                               [f"b.jsonl:{i}" for i in range(8)])
    assert len(dropped) == 4 and all(kept.count(r["kept"]) == 1 for r in dropped)  # each names one copy
    assert {r["kept"] for r in dropped} == {f"b.jsonl:{i}" for i in range(4)}  # the longer copies
    found = _why(out, "b.jsonl:2", capsys)
    assert len(found["kept"]) == 1 and not found["dropped"]
    run_pipeline(config, inputs, tmp_path / "again")
    assert _kept(tmp_path / "again") == kept

    from trident.data.build import tokenize_files
    from trident.data.tokenizer import train_tokenizer

    (tmp_path / "train.txt").write_text("\n".join(texts))
    train_tokenizer([tmp_path / "train.txt"], 300, tmp_path / "tok")
    tokenize_files(sorted(out.glob("shard-*.jsonl.zst")), tmp_path / "data", tmp_path / "tok" / "tokenizer.json",
                   progress=False)
    (tmp_path / "ids.txt").write_text("b.jsonl:5\n")
    capsys.readouterr()
    assert main(["data", "remove", "--prefix", str(tmp_path / "data"), "--ids", str(tmp_path / "ids.txt"),
                 "--out", str(tmp_path / "data-v2"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents_removed"] == 1 and report["documents"] == len(kept) - 1
    left = [json.loads(line)["id"] for line in (tmp_path / "data-v2.doc_ids.jsonl").read_text().splitlines()]
    assert "b.jsonl:5" not in left and "5" in left


def test_a_repeat_in_a_group_of_files_is_named_after_its_own_file(tmp_path):
    (tmp_path / "first.jsonl").write_text(json.dumps({"id": "z", "text": "x" * 160}) + "\n")  # a task alone
    (tmp_path / "second.jsonl").write_text(json.dumps({"id": "y", "text": "x" * 60}) + "\n")  # these two: one task
    (tmp_path / "third.jsonl").write_text(json.dumps({"id": "y", "text": "x" * 20}) + "\n" +
                                          json.dumps({"id": "z", "text": "x" * 20}) + "\n")
    inputs = [tmp_path / name for name in ("first.jsonl", "second.jsonl", "third.jsonl")]
    stats = run_pipeline({"stages": [], "shard_bytes": 180, "progress": False}, inputs, tmp_path / "out")
    assert len(stats["output"]["shards"]) == 2 and stats["stages"][0]["counters"]["ids_qualified"] == 1
    assert _kept(tmp_path / "out") == ["z", "y", "third.jsonl:y", "third.jsonl:z"]


def test_html_files_alone_need_no_claims_and_a_jsonl_id_equal_to_a_file_name_is_qualified(tmp_path):
    """An HTML file's id is its name, unique in the run: a run of HTML files writes no claims and
    compares none; a JSONL record whose id is such a name is still qualified."""
    site = tmp_path / "site"
    page = "<html><body><article><h1>Title</h1><p>" + "plain words here " * 40 + "</p></article></body></html>"
    for folder in ("a", "b"):
        (site / folder).mkdir(parents=True)
        (site / folder / "index.html").write_text(page)
    config = {"stages": [{"stage": "extract"}], "shard_bytes": 1, "progress": False, "keep_work": True}
    run_pipeline(config, [site], tmp_path / "html")  # shard_bytes 1: a read task a file
    assert not list((tmp_path / "html" / "work").rglob("*.ids.npz"))
    assert sorted(_kept(tmp_path / "html")) == ["a/index.html", "b/index.html"]

    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "a/index.html", "text": "a record named as a page is"}) + "\n")
    stats = run_pipeline(config, [site, more], tmp_path / "mixed")
    assert list((tmp_path / "mixed" / "work").rglob("*.ids.npz"))
    assert sorted(_kept(tmp_path / "mixed")) == ["a/index.html", "b/index.html", "more.jsonl:a/index.html"]
    assert stats["stages"][0]["counters"]["ids_qualified"] == 1
