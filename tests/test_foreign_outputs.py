"""Single-file outputs are never written over a file trident did not write (issue 58: the same mistake, the same
exit 2 everywhere): `tokenizer train --out FILE`, `launch --out DIR` (DIR/launch.sbatch); and
`pipeline-diagram --out DIR` draws into the folder instead of failing with a traceback."""
from trident.cli import main


def test_tokenizer_train_does_not_replace_an_existing_file_without_overwrite(tmp_path, capsys):
    (tmp_path / "c.txt").write_text("alpha beta gamma delta\n" * 50)
    (tmp_path / "mine.json").write_text("a user's own file")
    args = ["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size", "280", "--out"]
    assert main([*args, str(tmp_path / "mine.json")]) == 2
    assert "already exists" in capsys.readouterr().err and (tmp_path / "mine.json").read_text() == "a user's own file"
    assert main([*args, str(tmp_path / "mine.json"), "--overwrite"]) == 0


def test_launch_does_not_replace_a_foreign_sbatch_file(tmp_path, capsys):
    (tmp_path / "launch.sbatch").write_text("#!/bin/bash\n# the cluster team's own script\n")
    code = main(["launch", "gpt-125m", "model.vocab_size=50257", "--nodes", "1", "--gpus-per-node", "8", "--out",
                 str(tmp_path)])
    assert code == 2 and "not written by `trident launch`" in capsys.readouterr().err
    assert "cluster team" in (tmp_path / "launch.sbatch").read_text()


def test_pipeline_diagram_into_a_folder_writes_pipeline_png_there(tmp_path):
    assert main(["pipeline-diagram", "--pp", "2", "--micro-batches", "4", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "pipeline.png").stat().st_size > 0
