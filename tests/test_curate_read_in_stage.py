"""A pipeline whose first stage is fuzzy dedup reads its raw inputs inside the stage's signing pass
(GlobalStage.reads_raw): outputs, counters, drop logs, bad-record reports, strict-mode errors and a
resumed run are exactly those of the separate read phase (the stage declared unable to read raw input)."""
import json
import random

import pytest
import zstandard

from dedup_fixtures import fixture_documents
from trident.curate.dedup.fuzzy import FuzzyDedup
from trident.curate.document import CurateError
from trident.curate.run.pipeline import run_pipeline
from trident.curate.samples.crawl import write_sample_warc

FUZZY = {"stage": "fuzzy_dedup", "bands": 20, "partitions": 4}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Three JSONL inputs (plain, .zst, with bad records, blank lines and records without ids) and a WARC."""
    root = tmp_path_factory.mktemp("raw")
    docs = fixture_documents(3)
    rng = random.Random(0)
    lines = [json.dumps({"id": i, "text": t, **m} if rng.random() < 0.7 else {"text": t, **m}) for i, t, m in docs]
    plain, bad, packed = lines[0::3], lines[1::3], lines[2::3]
    bad[3:3] = ['{"text": broken', "", "   ", '["not", "an object"]', '{"id": "no_text"}', "x" * 5000]
    (root / "a.jsonl").write_text("\n".join(plain) + "\n")
    (root / "b.jsonl").write_bytes("\n".join(bad).encode() + b"\n\xff\xfe\n" + b'{"text": "\\ud800"}\n')
    (root / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress("\n".join(packed).encode()))
    write_sample_warc(root / "d.warc.gz", n_docs=6, seed=2)
    return sorted(root.iterdir())


def run(tmp_path, inputs, monkeypatch, fused: bool, name: str, stages=(FUZZY,), **config):
    monkeypatch.setattr(FuzzyDedup, "reads_raw", fused)
    return run_pipeline({"stages": list(stages), "max_doc_bytes": 4096, **config}, inputs, tmp_path / name)


def published(out) -> dict:
    """Every published file's bytes but stats.json, report.md and charts (they hold timings)."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.suffix not in (".json", ".md", ".png")}


def comparable(stats: dict) -> dict:
    """stats.json without timings and paths."""
    stages = [{k: v for k, v in s.items() if k != "seconds"} for s in stats["stages"]]
    return {"stages": stages, "errors": stats["errors"], "drops": stats["drops"], "accounting": stats["accounting"],
            "documents": stats["output"]["documents"]}


@pytest.mark.timeout(180)
def test_reading_inside_the_stage_equals_the_read_phase(tmp_path, inputs, monkeypatch):
    split = run(tmp_path, inputs, monkeypatch, False, "split")
    fused = run(tmp_path, inputs, monkeypatch, True, "fused")
    assert comparable(fused) == comparable(split)
    assert published(tmp_path / "fused") == published(tmp_path / "split")
    read = split["stages"][0]["counters"]
    assert split["stages"][0]["name"] == "read" and read["dropped:too_large"] == 1
    assert read["dropped:malformed_json"] == 1
    assert read["dropped:invalid_utf8"] == 1 and read["dropped:invalid_unicode"] == 1
    assert read["dropped:malformed_record"] == 2 and split["stages"][1]["counters"]["dropped:duplicate"] > 10
    two = run(tmp_path, inputs, monkeypatch, True, "fused2", workers=2)
    assert comparable(two) == comparable(split) and published(tmp_path / "fused2") == published(tmp_path / "split")


def test_strict_mode_fails_on_the_same_record(tmp_path, inputs, monkeypatch):
    errors = []
    for fused in (False, True):
        with pytest.raises(CurateError, match="record at line 4: malformed_json") as caught:
            run(tmp_path, inputs, monkeypatch, fused, f"strict{fused}", strict=True)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


@pytest.mark.timeout(180)
def test_a_resumed_run_rereads_only_unfinished_inputs(tmp_path, inputs, monkeypatch):
    fresh = run(tmp_path, inputs, monkeypatch, True, "fresh")
    out = tmp_path / "crashed"
    run(tmp_path, inputs, monkeypatch, True, "crashed", keep_work=True)
    # The state of a crash inside the signing pass after the first input's read: later reads and the
    # stage's own work never finished.
    phase0, phase1 = out / "work" / "phase-00", out / "work" / "phase-01"
    for path in sorted(phase0.glob("shard-0000[1-9]*")):
        path.unlink()
    (phase1 / "_phase.done.json").unlink()
    kept = (phase0 / "shard-00000.jsonl").stat().st_mtime_ns
    resumed = run(tmp_path, inputs, monkeypatch, True, "crashed", keep_work=True)
    assert (phase0 / "shard-00000.jsonl").stat().st_mtime_ns == kept  # read once, not again
    assert comparable(resumed) == comparable(fresh)
    assert {k: v for k, v in published(out).items() if not k.startswith("work/")} == published(tmp_path / "fresh")


def test_a_later_global_stage_sees_the_read_once(tmp_path, inputs, monkeypatch):
    stages = (FUZZY, {"stage": "exact_dedup"})
    split = run(tmp_path, inputs, monkeypatch, False, "split", stages=stages)
    fused = run(tmp_path, inputs, monkeypatch, True, "fused", stages=stages)
    assert [s["name"] for s in fused["stages"]] == ["read", "fuzzy_dedup", "exact_dedup"]
    assert comparable(fused) == comparable(split)
    assert published(tmp_path / "fused") == published(tmp_path / "split")
