"""Pipelines end to end: config loading, the MT-NLG funnel on a sample WARC, accounting, bad input,
resume after a crash, local multi-process == single process, and the CLI (Ray == single process, with
every file on S3: test_object_storage.py)."""
import json

import pytest

from trident.cli import main
from trident.curate.document import CurateError, Document
from trident.curate.read import shards
from trident.curate.read.shards import read_shard
from trident.curate.run.pipeline import check_accounting, load_pipeline_config, run_pipeline
from trident.curate.samples.crawl import write_sample_warc
from trident.curate.stage import StreamingStage, register_stage

STREAMING = [{"stage": "extract"}, {"stage": "langid", "languages": ["en"]}, {"stage": "clean"},
             {"stage": "min_length", "min_tokens": 128}]


ONE_SHARD_EACH = ["shard_bytes=0"]  # the small sample inputs would be read into one shard: two to spread


def output_docs(stats):
    return [doc for shard in stats["output"]["shards"] for doc in read_shard(shard)]


def counters(stats, name):
    return next(s["counters"] for s in stats["stages"] if s["name"] == name)


@pytest.fixture(scope="module")
def warcs(tmp_path_factory):
    root = tmp_path_factory.mktemp("warcs")
    kinds = [write_sample_warc(root / "a.warc.gz", n_docs=16, seed=0),
             write_sample_warc(root / "b.warc", n_docs=6, seed=1)]
    return [root / "a.warc.gz", root / "b.warc"], kinds


def test_config_loading_overrides_and_errors():
    cfg = load_pipeline_config("curate-cc", ["workers=3", "stages.min_length.min_tokens=64",
                                             "stages.0.favor_precision=false"])
    assert cfg.workers == 3 and cfg.dataset == "cc"
    names = [s["stage"] for s in cfg.stages]
    # MT-NLG's order, plus trident's site_lines after language id
    assert names[:6] == ["extract", "langid", "site_lines", "quality", "clean", "min_length"]
    assert names.index("fuzzy_dedup") < names.index("exact_dedup") < names.index("decontaminate")
    assert cfg.stages[5]["min_tokens"] == 64 and cfg.stages[0]["favor_precision"] is False
    assert load_pipeline_config(STREAMING).stages == STREAMING  # a bare list is a pipeline too
    with pytest.raises(CurateError, match="unknown pipeline config key .wrokers."):
        load_pipeline_config({"stages": [], "wrokers": 2})
    with pytest.raises(CurateError, match="unknown stage 'extrct'"):
        load_pipeline_config([{"stage": "extrct"}])
    with pytest.raises(CurateError, match="quality.*train-quality"):
        load_pipeline_config("curate-cc", ["stages.quality.enabled=true"])
    with pytest.raises(CurateError, match="must name exactly one stage"):
        load_pipeline_config(STREAMING + [{"stage": "clean"}], ["stages.clean.normalization=NFKC"])
    with pytest.raises(CurateError, match="not found"):
        load_pipeline_config("no-such-pipeline.yaml")


def test_mtnlg_funnel_on_sample_warc(tmp_path, warcs):
    paths, kinds = warcs
    stats = run_pipeline("curate-cc", [paths[0]], tmp_path / "out")
    assert stats["accounting"] == {"ok": True, "problems": []}
    assert [s["name"] for s in stats["stages"]] == ["read", "extract", "langid", "site_lines", "clean", "min_length",
                                                     "fuzzy_dedup", "exact_dedup"]
    k = kinds[0]
    assert counters(stats, "read")["in"] == sum(k.values())
    assert counters(stats, "extract")["dropped:non_200"] == k["not_found"] == 1
    assert counters(stats, "extract")["dropped:non_html"] == k["non_html"] == 2
    langid = counters(stats, "langid")
    assert langid["dropped:language:de"] == k["german"] and langid["dropped:language:fr"] == k["french"]
    assert counters(stats, "min_length")["dropped:too_short"] >= k["short"]
    assert counters(stats, "fuzzy_dedup")["dropped:duplicate"] >= k["exact_duplicate"] + k["near_duplicate"]
    docs = output_docs(stats)
    assert len(docs) == stats["output"]["documents"] and 0 < len(docs) <= k["english"]
    assert all(d.meta["language"] == "en" and d.meta["dataset"] == "cc" for d in docs)
    assert all("<p>" not in d.text and "cookies" not in d.text for d in docs)
    assert len({" ".join(d.text.lower().split()) for d in docs}) == len(docs)
    assert not {"de", "fr", "deals", "news", "missing"} & {d.meta["url"].split("/")[3] for d in docs}
    out = tmp_path / "out"
    saved = json.loads((out / "stats.json").read_text())
    assert saved["stages"] == stats["stages"] and saved["accounting"]["ok"]
    report = (out / "report.md").read_text()
    assert "![funnel](funnel.png)" in report and "| langid | streaming |" in report
    assert (out / "funnel.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "work").exists()


def test_bad_input_is_reported_and_counted_or_fatal_in_strict_mode(tmp_path):
    good = "The standard library offers many modules for everyday tasks and they are well documented. " * 20
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join([json.dumps({"text": good}).encode(), b"\n", b'{"text": broken\n',
                               b"\xff\xfe\xfa\n", json.dumps({"text": ""}).encode(), b"\n",
                               json.dumps({"text": good + " more"}).encode(), b"\n"]))
    stats = run_pipeline({"stages": STREAMING}, [path], tmp_path / "out")
    assert stats["accounting"]["ok"]
    assert counters(stats, "read")["dropped:malformed_json"] == 1
    assert counters(stats, "read")["dropped:invalid_utf8"] == 1
    assert counters(stats, "langid")["dropped:empty"] == 1
    assert {(e["file"], e["position"]) for e in stats["errors"]} == {(str(path), "line 2"), (str(path), "line 3")}
    assert stats["output"]["documents"] == 2
    assert "| " + str(path) + " | line 2 | malformed_json |" in (tmp_path / "out" / "report.md").read_text()
    with pytest.raises(CurateError, match="line 2: malformed_json"):
        run_pipeline({"stages": STREAMING, "strict": True}, [path], tmp_path / "strict")


def test_accounting_check_finds_vanished_documents():
    stages = [{"name": "a", "counters": {"in": 10, "out": 8, "dropped:x": 2}},
              {"name": "b", "counters": {"in": 8, "out": 5, "dropped:y": 2}},
              {"name": "c", "counters": {"in": 4, "out": 4}}]
    problems = check_accounting(stages)
    assert len(problems) == 2 and "stage b" in problems[0] and "stage c" in problems[1]


CRASH = {"armed": False}


@register_stage("test_crash")
class CrashOnSource(StreamingStage):
    """Test stage: raises while armed when it meets a document from `source` (a simulated crash)."""

    def __init__(self, source: str = "") -> None:
        super().__init__(source=source)

    def apply(self, doc: Document) -> Document | str:
        if CRASH["armed"] and doc.meta.get("source") == self.params["source"]:
            raise RuntimeError("simulated crash")
        return doc


def test_rerun_after_crash_redoes_only_unfinished_shards(tmp_path):
    inputs = []
    for name in ("a", "b", "c"):
        inputs.append(tmp_path / f"{name}.jsonl")
        inputs[-1].write_text("".join(json.dumps({"text": f"{name} document {i}"}) + "\n" for i in range(5)))
    config = {"stages": [{"stage": "clean"}, {"stage": "test_crash", "source": "c.jsonl"}], "keep_work": True,
              "shard_bytes": 0}  # a shard per input, so one of them can crash alone
    out = tmp_path / "out"
    CRASH["armed"] = True
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_pipeline(config, inputs, out)
    markers = sorted((out / "work" / "phase-00").glob("*.done.json"))
    assert [m.name for m in markers] == ["shard-00000.jsonl.zst.done.json", "shard-00001.jsonl.zst.done.json"]
    before = {m.name: m.stat().st_mtime_ns for m in markers}
    CRASH["armed"] = False
    stats = run_pipeline(config, inputs, out)
    assert {m.name: m.stat().st_mtime_ns for m in markers} == before  # finished shards were not redone
    assert stats["output"]["documents"] == 15 and stats["accounting"]["ok"]
    assert counters(stats, "clean")["in"] == 15  # counters of resumed shards come from their markers
    fresh = run_pipeline(config, inputs, tmp_path / "fresh")
    assert [d.text for d in output_docs(fresh)] == [d.text for d in output_docs(stats)]


@pytest.fixture(scope="module")
def single_process_run(tmp_path_factory, warcs):
    return run_pipeline("curate-cc", warcs[0], tmp_path_factory.mktemp("one"), workers=1, overrides=ONE_SHARD_EACH)


@pytest.mark.timeout(180)
def test_local_processes_match_single_process(tmp_path, warcs, single_process_run):
    one = single_process_run
    two = run_pipeline("curate-cc", warcs[0], tmp_path / "two", workers=2, overrides=ONE_SHARD_EACH)
    assert two["workers"] == 2 and two["accounting"]["ok"]
    assert [s["counters"] for s in one["stages"]] == [s["counters"] for s in two["stages"]]
    assert output_docs(one) == output_docs(two)
    assert len(one["output"]["shards"]) == 2


@pytest.mark.timeout(180)
def test_cli_end_to_end(tmp_path, warcs, capsys):
    paths, _ = warcs
    out = tmp_path / "cli"
    code = main(["curate", "curate-cc", "--input", str(paths[1]), "--out", str(out), "--json",
                 "stages.min_length.min_tokens=100"])
    assert code == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["accounting"]["ok"] and (out / "report.md").exists()
    assert stats["config"]["stages"][5]["min_tokens"] == 100
    assert main(["curate", "curate-cc", "--out", str(out)]) == 1
    assert "no inputs" in capsys.readouterr().err
    code = main(["curate", "curate-cc", "--input", str(paths[1]), "--out", str(out), "bogus=1"])
    assert code == 2 and "unknown pipeline config key 'bogus'" in capsys.readouterr().err  # a config mistake, as train


def test_custom_stage_module_from_config(tmp_path, monkeypatch):
    (tmp_path / "my_stages.py").write_text(
        "from trident.curate.stage import StreamingStage, register_stage\n"
        "@register_stage('shout')\n"
        "class Shout(StreamingStage):\n"
        "    def apply(self, doc):\n"
        "        doc.text = doc.text.upper()\n"
        "        return doc\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "quiet words"}) + "\n")
    stats = run_pipeline({"modules": ["my_stages"], "stages": [{"stage": "shout"}]}, [data], tmp_path / "out")
    assert [d.text for d in output_docs(stats)] == ["QUIET WORDS"]
    with pytest.raises(CurateError, match="cannot import 'missing_stages'"):
        load_pipeline_config({"modules": ["missing_stages"], "stages": []})


def test_output_folder_is_never_clobbered(tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"text": f"document number {i}"}) + "\n" for i in range(6)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "shard-00007.jsonl.zst").write_bytes(b"another run's shard")
    (out / "work").mkdir()
    (out / "work" / "mine.txt").write_text("keep")
    (tmp_path / "p.yaml").write_text("stages: [{stage: clean}]\n")
    args = ["curate", str(tmp_path / "p.yaml"), "--input", str(data), "--out", str(out)]
    assert main(args) == 2  # used to delete work/ and every shard-*.jsonl.zst in the folder
    assert "not empty" in capsys.readouterr().err
    assert main(args + ["--overwrite"]) == 2  # a work/ trident did not stamp is never deleted
    assert "was not written by trident curate" in capsys.readouterr().err
    assert (out / "work" / "mine.txt").read_text() == "keep"
    (out / "work" / "mine.txt").unlink()
    (out / "work").rmdir()
    assert main(args + ["--overwrite"]) == 0
    assert (out / "shard-00007.jsonl.zst").read_bytes() == b"another run's shard"
    assert main(args) == 2  # a finished run is not resumed: its results stay
    first = (out / "shard-00000.jsonl.zst").read_bytes()
    assert main(args + ["--overwrite"]) == 0  # replaces its own earlier outputs, keeps the rest
    assert (out / "shard-00000.jsonl.zst").read_bytes() == first
    assert (out / "shard-00007.jsonl.zst").read_bytes() == b"another run's shard"


def test_small_inputs_are_read_together_into_shards_of_the_target_size(tmp_path):
    pages = []
    for i in range(7):  # seven small HTML pages of ~1.3 KB
        pages.append(tmp_path / "site" / f"page{i}.html")
        pages[-1].parent.mkdir(exist_ok=True)
        body = " ".join(f"Paragraph {i} sentence {j} tells the reader about topic {i}." for j in range(20))
        pages[-1].write_text(f"<html><body><article><p>{body}</p></article></body></html>")
    config = {"stages": [{"stage": "extract"}], "shard_bytes": 3 * pages[0].stat().st_size}
    stats = run_pipeline(config, pages, tmp_path / "out")
    assert len(stats["output"]["shards"]) == 3 and stats["output"]["documents"] == 7  # 3 + 3 + 1 pages
    assert sorted(doc.id for doc in output_docs(stats)) == sorted(p.name for p in pages)
    each = run_pipeline({**config, "shard_bytes": 0}, pages, tmp_path / "each")
    assert len(each["output"]["shards"]) == 7 and output_docs(each) == output_docs(stats)


def test_shards_only_a_later_phase_reads_are_written_at_the_work_level(tmp_path, monkeypatch):
    """Every phase but the last, global stages too, writes its shards at the faster work level; the
    published shards are at the published level."""
    levels = {}
    original = shards.ShardWriter.__init__

    def recording(self, path, level=shards.LEVEL):
        levels[str(path)] = level
        original(self, path, level)

    monkeypatch.setattr(shards.ShardWriter, "__init__", recording)
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i % 7} of the set"}) + "\n" for i in range(20)))
    config = {"stages": [{"stage": "clean"}, {"stage": "exact_dedup"}, {"stage": "fuzzy_dedup", "ngram": 2},
                         {"stage": "exact_dedup"}], "keep_work": True}
    stats = run_pipeline(config, [data], tmp_path / "out")
    work = {path: level for path, level in levels.items() if "/phase-0" in path and "drops" not in path}
    assert {p.split("/phase-")[1][:2]: level for p, level in work.items()} == {
        "00": shards.WORK_LEVEL, "01": shards.WORK_LEVEL, "02": shards.WORK_LEVEL, "03": shards.LEVEL}
    assert stats["accounting"]["ok"] and stats["output"]["documents"] >= 1
