"""The command line helps: --version, unknown options exit 2, did-you-mean for a mistyped command, preset,
config key or value, a training command offers training presets only, and the same mistake (a non-empty
output folder) exits 2 in every command."""
import json

import pytest

from trident.cli import main
from trident.config import ConfigError, load_config
from trident.config.typed import preset_names


def _exits(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out = capsys.readouterr()
    return stop.value.code, out.out, out.err


def test_version_prints_the_version_and_unknown_options_exit_2(capsys):
    import trident

    code, out, _ = _exits(["--version"], capsys)
    assert code == 0 and out.strip() == f"trident {trident.__version__}"
    for argv in (["--foo"], ["--foo", "plan", "tiny"], ["--"]):
        code, _, err = _exits(argv, capsys)
        assert code == 2 and "error:" in err, argv
    assert main([]) == 0 and "COMMAND" in capsys.readouterr().out  # no arguments: the help, as before


def test_a_mistyped_command_exits_2_naming_the_nearest(capsys):
    code, _, err = _exits(["trian", "tiny"], capsys)
    assert code == 2 and "unknown command 'trian'; did you mean 'train'?" in err
    code, _, err = _exits(["xyzzy"], capsys)
    assert code == 2 and "unknown command 'xyzzy' (commands: demo, run, train" in err and "did you mean" not in err


def test_a_mistyped_preset_offers_the_nearest_training_preset_only(tmp_path, capsys):
    assert main(["train", "tiyn", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "config file 'tiyn' not found; did you mean 'tiny'? (training presets: " in err and "gpt-125m" in err
    assert "curate-cc" not in err and "blend-mtnlg" not in err
    assert main(["train", "curate-cc", "--out", str(tmp_path / "o")]) == 2  # a curation preset is not a config
    assert "'curate-cc' is a curation preset, not a training config" in capsys.readouterr().err
    kinds = preset_names()
    assert kinds["curate-cc"] == "curation" and kinds["blend-mtnlg"] == "blend" and kinds["tiny"] == "training"
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("override, said", [
    ("train.stpes=3", "unknown config key 'train.stpes' (did you mean 'train.steps'?)"),
    ("parallel.schedule=1f1B", "got '1f1B'; did you mean '1f1b'?"),
    ("model.mlp=swiglo", "got 'swiglo'; did you mean 'swiglu'?"),
])
def test_a_mistyped_key_or_value_names_the_nearest(override, said):
    with pytest.raises(ConfigError) as error:
        load_config("tiny", [override]).validate(1)
    assert said in str(error.value)


def test_a_non_empty_output_folder_exits_2_in_export_and_import_alike(tmp_path, capsys):
    """import-hf into a folder that holds checkpoints said so and exited 1; export-hf exits 2."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "taken" / "step_0000000").mkdir(parents=True)
    (tmp_path / "taken" / "step_0000000" / "COMPLETE").write_text("")
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "taken")]) == 2
    assert "already holds checkpoints" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "full")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_demo_refuses_too_few_documents_before_any_work(tmp_path, capsys):
    assert main(["demo", "--max-docs", "200", "--out", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert "--max-docs 200" in err and "give --max-docs 300 or more" in err
    assert not (tmp_path / "demo").exists()
