"""`trident demo` end to end, shortened (few steps, small corpus, a one-layer model with the CPU peak given
rather than measured): every stage runs and reports; training and evaluation run as child processes."""
import json

import pytest

from trident.cli import main

# one layer 64 wide instead of 4 x 192: the test's CPU time halves (27.6 -> 15.0 s); the MFU peak given, not measured
SMALL_MODEL = ["model.num_layers=1", "model.hidden_size=64", "model.num_heads=2", "train.peak_tflops=1"]


@pytest.mark.timeout(300)
def test_demo_runs_every_stage_and_writes_the_report(tmp_path, capsys):
    command = ["demo", "--out", str(tmp_path), "--steps", "4", "--max-docs", "300", "train.eval_interval=2",
               "train.eval_iters=1", *SMALL_MODEL]
    assert main(command) == 0
    report = (tmp_path / "report.md").read_text()
    for section in ("## Sample", "## Curation", "## Evaluation", "![loss](loss.png)"):
        assert section in report
    assert (tmp_path / "loss.png").stat().st_size > 1000
    assert "untrained 0-shot" in report
    stats = json.loads((tmp_path / "curated" / "web" / "stats.json").read_text())
    assert stats["accounting"]["ok"] and 0 < stats["output"]["documents"] < stats["stages"][0]["counters"]["in"]
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert set(results["results"]) == {"lambada", "hellaswag"}
    assert (tmp_path / "train" / "checkpoints" / "step_0000004" / "COMPLETE").exists()

    # a rerun into its own finished folder goes on as `trident run` does: every stage finished, none runs
    assert main([*command, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["ran"] == []
    assert set(json.loads((tmp_path / ".trident-run.json").read_text())["outputs"]) >= {"report.md", "train"}
