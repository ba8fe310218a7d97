"""Every dropped document is traceable: one compressed drop log per shard and step, gathered into
OUT/drops/, as many records as the stages dropped (the run refuses to finish otherwise), and
`trident curate why OUT URL|ID` naming the stage, reason and score, or the shard that kept it."""
import json

import pytest

from trident.cli import main
from trident.curate.droplog import read_log
from trident.curate.run.pipeline import run_pipeline
from trident.curate.samples.crawl import write_sample_warc


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("why")
    write_sample_warc(root / "a.warc.gz", n_docs=16, seed=0)
    bad = root / "b.jsonl"
    bad.write_bytes(b'{"text": broken\n' + json.dumps({"text": "short"}).encode() + b"\n")
    stats = run_pipeline("curate-cc", [root / "a.warc.gz", bad], root / "out", workers=1)
    records = [r for log in sorted((root / "out" / "drops").glob("*/*.drops.jsonl.zst")) for r in read_log(log)]
    return root / "out", stats, records


def test_every_drop_is_logged_with_its_stage_reason_and_score(run):
    out, stats, records = run
    dropped = {(s["name"], k[8:]): v for s in stats["stages"] for k, v in s["counters"].items()
               if k.startswith("dropped:")}
    logged: dict = {}
    for record in records:
        logged[(record["stage"], record["reason"])] = logged.get((record["stage"], record["reason"]), 0) + 1
    assert logged == dropped and stats["drops"]["records"] == len(records) > 0
    assert stats["accounting"]["ok"]
    langid = [r for r in records if r["stage"] == "langid" and r["reason"].startswith("language:")]
    assert langid and all(0 < r["score"] <= 1 and r["url"].startswith("http") for r in langid)
    short = [r for r in records if r["reason"] == "too_short"]  # with the GPT-2 pieces it counted
    assert short and all(0 <= r["score"] < 64 for r in short)
    dupes = [r for r in records if r["reason"] == "duplicate"]
    assert dupes and all(r["id"] == r["url"] for r in dupes)  # a WARC record's id is its URI
    unread = [r for r in records if r["stage"] == "read"]
    assert [r["reason"] for r in unread] == ["malformed_json"] and unread[0]["position"].endswith("b.jsonl line 1")
    assert "drops" in json.loads((out / ".trident-run.json").read_text())["outputs"]
    assert f"Drop log: {len(records)} dropped documents" in (out / "report.md").read_text()


def test_why_names_the_stage_or_the_shard(run, capsys):
    out, stats, records = run
    german = next(r for r in records if r["reason"] == "language:de")
    assert main(["curate", "why", str(out), german["url"]]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{german['url']}: dropped by langid: language:de, score {german['score']}")
    dupe = next(r for r in records if r["reason"] == "duplicate")
    assert main(["curate", "why", str(out), dupe["id"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dropped"][0]["stage"] in ("fuzzy_dedup", "exact_dedup")
    kept = json.loads(next(iter_lines(stats["output"]["shards"][0])))
    assert main(["curate", "why", str(out), kept["url"]]) == 0
    assert f"kept as {kept['id']} in {stats['output']['shards'][0]} line 1" in capsys.readouterr().out
    assert main(["curate", "why", str(out), "b.jsonl line 1"]) == 0
    assert "dropped by read: malformed_json" in capsys.readouterr().out
    assert main(["curate", "why", str(out), "https://nowhere.example/x"]) == 1
    assert "not in" in capsys.readouterr().out
    assert main(["curate", "why", str(out / "missing"), "x"]) == 1  # names the folder, no traceback
    assert "no stats.json" in capsys.readouterr().err


def iter_lines(shard):
    from trident.text.compressed import open_binary

    with open_binary(shard) as stream:
        yield from (line.decode() for line in stream)
