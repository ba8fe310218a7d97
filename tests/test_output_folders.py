"""Output folders never lose earlier results: every command that writes a folder refuses one holding
results it would replace, unless --overwrite; with it, only what trident wrote there is removed."""
import json

import pytest

from trident.cli import main
from trident.data.output_folder import (MARKER, OutputFolderError, claim_output_folder, read_marker, record_outputs,
                                        start_outputs)


def test_a_folder_is_claimed_only_when_empty_resumed_or_overwritten(tmp_path):
    assert claim_output_folder(tmp_path / "new", "train", False) is None
    (tmp_path / "old" / "results.csv").parent.mkdir()
    (tmp_path / "old" / "results.csv").write_text("x")
    with pytest.raises(OutputFolderError, match="files trident did not write: results.csv"):
        claim_output_folder(tmp_path / "old", "train", False)
    assert claim_output_folder(tmp_path / "old", "train", True) is None
    before = start_outputs(tmp_path / "run", "demo", False)
    (tmp_path / "run" / "report.md").write_text("first")
    record_outputs(tmp_path / "run", "demo", before)
    assert read_marker(tmp_path / "run") == {"command": "demo", "outputs": ["report.md"]}
    with pytest.raises(OutputFolderError, match="a trident demo run: report.md"):
        start_outputs(tmp_path / "run", "demo", False)
    assert claim_output_folder(tmp_path / "run", "demo", False, same_run=lambda marker: True) is not None
    (tmp_path / "run" / "mine.txt").write_text("keep")
    start_outputs(tmp_path / "run", "demo", True)  # removes only what the marker lists
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [MARKER, "mine.txt"]


def test_commands_refuse_a_folder_with_results_they_would_replace(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    assert main(["eval", "--hf", str(tmp_path / "model"), "--tasks", "piqa", "--out", str(out)]) == 2
    assert "already holds results.json" in capsys.readouterr().err
    assert main(["export-hf", str(tmp_path / "ckpt"), str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["demo", "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text()) == {}
