"""Output folders never lose earlier results: every command that writes a folder refuses one holding
results it would replace, unless --overwrite; with it, only what trident wrote there is removed."""
import json

import pytest

from trident.cli import main
from trident.data.output_folder import MARKER, OutputFolderError, claim_output_folder, read_marker
from trident.data.output_lock import LOCK
from trident.data.run_folder import RunFolder


def test_a_folder_is_claimed_only_when_empty_resumed_or_overwritten(tmp_path):
    assert claim_output_folder(tmp_path / "new", "train", False) is None
    (tmp_path / "old" / "results.csv").parent.mkdir()
    (tmp_path / "old" / "results.csv").write_text("x")
    with pytest.raises(OutputFolderError, match="files trident did not write: results.csv"):
        claim_output_folder(tmp_path / "old", "train", False)
    assert claim_output_folder(tmp_path / "old", "train", True) is None
    with RunFolder(tmp_path / "run", "demo") as folder:
        folder.start_outputs(False)
        (folder / "report.md").write_text("first")
        folder.record_outputs()
    assert read_marker(tmp_path / "run") == {"command": "demo", "outputs": ["report.md"]}
    with pytest.raises(OutputFolderError, match="a trident demo run: report.md"):
        RunFolder(tmp_path / "run", "demo").start_outputs(False)
    assert claim_output_folder(tmp_path / "run", "demo", False, same_run=lambda marker: True) is not None
    (tmp_path / "run" / "mine.txt").write_text("keep")
    RunFolder(tmp_path / "run", "demo").start_outputs(True)  # removes only what the marker lists
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [MARKER, "mine.txt"]


def test_a_marker_another_node_is_writing_does_not_make_the_folder_foreign(tmp_path):
    (tmp_path / f".{MARKER}.tmp4242").write_text("{")  # a torchrun node of the same job, mid-write (CI, elastic)
    assert claim_output_folder(tmp_path, "train", False) is None
    (tmp_path / ".cache").mkdir()
    with pytest.raises(OutputFolderError, match="did not write: .cache"):
        claim_output_folder(tmp_path, "train", False)


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


def writing_commands(tmp_path):
    """Every command that writes, as (its command line, the path it writes, whether that is a prefix)."""
    out, inputs = tmp_path / "out", tmp_path / "in.jsonl"
    inputs.write_text(json.dumps({"text": "a document"}) + "\n")
    return {
        "train": (["train", "tiny", "--out", str(out)], out, False),
        "curate": (["curate", "curate-cc", "--input", str(inputs), "--out", str(out)], out, False),
        "run": (["run", str(tmp_path / "flow.yaml"), "--out", str(out)], out, False),
        "demo": (["demo", "--out", str(out)], out, False),
        "tokenize": (["tokenize", "--input", str(inputs), "--output-prefix", str(out / "data"), "--tokenizer",
                      str(tmp_path / "tok")], out / "data", True),
        "eval": (["eval", "--hf", str(tmp_path / "model"), "--tasks", "piqa", "--out", str(out)], out, False),
        "export-hf": (["export-hf", str(tmp_path / "ckpt"), str(out)], out, False),
        "data remove": (["data", "remove", "--prefix", str(tmp_path / "ds"), "--ids", str(inputs), "--out",
                         str(out / "data")], out / "data", True),
    }


COMMANDS = ["train", "curate", "run", "demo", "tokenize", "eval", "export-hf", "data remove"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_writing_command_refuses_a_folder_another_live_run_holds(tmp_path, capsys, command):
    argv, path, prefix = writing_commands(tmp_path)[command]
    with RunFolder(path, "another", prefix=prefix):  # a live run of another id (this process) holds it
        assert main(argv) == 2
        assert "another trident run is writing into this folder" in capsys.readouterr().err
        assert [p.name for p in (tmp_path / "out").iterdir()] == [f"{LOCK}.data" if prefix else LOCK]
    assert not (tmp_path / "out").exists()  # the refused command wrote nothing; the lock took its folder away
