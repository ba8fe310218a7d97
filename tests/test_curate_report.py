"""The curation report: histogram bins sort with their open-ended "20+" bin, and a failing report
never fails a finished run (outputs and stats.json stay, one line is logged, exit 0)."""
import json
import logging

import trident.curate.report as report
from trident.cli import main
from trident.curate.pipeline import run_pipeline

OTHER = ("Un petit chat gris dort tous les jours sur le rebord de la fenêtre de la cuisine pendant que "
         "la pluie tombe doucement sur les toits de la vieille ville endormie. ")
FOREIGN = ("Der schnelle braune Fuchs springt über den faulen Hund und läuft dann weiter durch den "
           "dunklen Wald bis zum kleinen Fluss am Rande des Dorfes, wo er sich ausruht. ")


def test_cluster_size_histogram_sorts_open_ended_bin_last():
    stats = {"stages": [{"counters": {"hist:cluster_size:20+": 1, "hist:cluster_size:03": 2,
                                      "hist:cluster_size:02": 5, "hist:cluster_size:11": 1}}]}
    assert list(report.histogram(stats, "cluster_size")) == ["02", "03", "11", "20+"]


def write_near_duplicates(path, n=25):
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"d{i}", "text": FOREIGN * 6 + f"Seite {i}."}) + "\n")
        for i in range(2):  # a second, small cluster: its bin "02" is sorted together with "20+"
            f.write(json.dumps({"id": f"o{i}", "text": OTHER * 6 + f"Page {i}."}) + "\n")


def test_twenty_plus_cluster_reports_and_exits_0(tmp_path):
    source = tmp_path / "crawl.jsonl"
    write_near_duplicates(source)
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  - {stage: fuzzy_dedup}\n")
    assert main(["curate", str(pipeline), "--input", str(source), "--out", str(tmp_path / "out"), "--json"]) == 0
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["output"]["documents"] == 2
    assert "hist:cluster_size:20+" in stats["stages"][-1]["counters"]
    assert (tmp_path / "out" / "report.md").exists()


def test_report_failure_is_one_logged_line_not_a_failed_run(tmp_path, monkeypatch, caplog):
    source = tmp_path / "crawl.jsonl"
    write_near_duplicates(source, n=3)

    def broken(stats, out_dir):
        raise RuntimeError("plotting backend missing")

    monkeypatch.setattr(report, "write_report", broken)
    with caplog.at_level(logging.WARNING):
        stats = run_pipeline([{"stage": "fuzzy_dedup"}], [source], tmp_path / "out")
    assert stats["output"]["documents"] == 2 and (tmp_path / "out" / "stats.json").exists()
    lines = [r.getMessage() for r in caplog.records if "report" in r.getMessage()]
    assert len(lines) == 1 and "plotting backend missing" in lines[0] and "\n" not in lines[0]


def test_a_damaged_record_is_shown_escaped_in_one_table_cell():
    cell = report._cell("bad \x00\x1b[31m | json\nline")
    assert cell == "bad \\x00\\x1b[31m \\| json\\nline" and "\n" not in cell
    assert report._cell("x" * 500).endswith("...") and len(report._cell("x" * 500)) == 163
