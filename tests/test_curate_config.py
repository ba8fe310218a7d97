"""Curation pipeline config: top-level keys are typed like the training config; unknown keys and
wrong types name the key and `trident curate` exits 2 on them, as `trident train` does."""
import json

import pytest

from trident.cli import main
from trident.config import ConfigError
from trident.curate.document import CurateError
from trident.curate.run.pipeline import load_pipeline_config, run_pipeline

STAGES = [{"stage": "clean"}]


@pytest.mark.parametrize("override,key", [
    ("workers=two", "workers"),
    ("workers=-1", "workers"),
    ("workers=1.5", "workers"),
    ("strict='false'", "strict"),
    ("strict=1", "strict"),
    ("keep_work=yes please", "keep_work"),
    ("progress=0", "progress"),
    ("max_doc_bytes=0", "max_doc_bytes"),
    ("max_doc_bytes=big", "max_doc_bytes"),
    ("dataset=5", "dataset"),
    ("executor=slurm", "executor"),
    ("ray_address=5", "ray_address"),
    ("modules=my_stages", "modules"),
    ("inputs=a.jsonl", "inputs"),
    ("inputs=[{dataset: cc}]", "inputs"),
    ("stages=clean", "stages"),
])
def test_top_level_keys_are_typed_and_named(override, key):
    with pytest.raises(ConfigError, match=f"pipeline config key '{key}': expected"):
        load_pipeline_config(STAGES, [override])


def test_file_values_are_typed_too(tmp_path):
    config = tmp_path / "p.yaml"
    config.write_text("workers: two\nstages:\n  - {stage: clean}\n")
    with pytest.raises(ConfigError, match="pipeline config key 'workers'"):
        load_pipeline_config(config)
    config.write_text("stages: {stage: clean}\n")
    with pytest.raises(ConfigError, match="pipeline config key 'stages'"):
        load_pipeline_config(config)


def test_config_errors_are_still_curate_errors():
    """Callers that catch CurateError keep working; ConfigError is what makes the CLI exit 2."""
    with pytest.raises(CurateError):
        load_pipeline_config({"stages": [], "wrokers": 2})
    with pytest.raises(ConfigError, match="unknown stage"):
        load_pipeline_config([{"stage": "extrct"}])
    with pytest.raises(ConfigError, match="override 'workers=\\[1,'.*not valid YAML"):
        load_pipeline_config(STAGES, ["workers=[1,"])


def test_run_pipeline_checks_its_own_executor_and_workers(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "a b c"}) + "\n")
    with pytest.raises(ConfigError, match="pipeline config key 'workers'"):
        run_pipeline(STAGES, [data], tmp_path / "out", workers=-2)


@pytest.mark.parametrize("args,key", [
    (["workers=two"], "workers"),
    (["strict='false'"], "strict"),
    (["bogus=1"], "bogus"),
    (["--workers", "-1"], "workers"),
])
def test_cli_exits_2_naming_the_key(tmp_path, capsys, args, key):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "a b c"}) + "\n")
    config = tmp_path / "p.yaml"
    config.write_text("stages:\n  - {stage: clean}\n")
    assert main(["curate", str(config), "--input", str(data), "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert f"'{key}'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "stats.json").exists()


@pytest.mark.parametrize("stage,param,value", [
    ("min_length", "min_tokens", "abc"), ("langid", "threshold", "x"), ("gopher_quality", "min_words", "a"),
    ("clean", "normalization", 5), ("fuzzy_dedup", "threshold", "high"),
])
def test_stage_parameters_of_the_wrong_type_name_stage_and_parameter(stage, param, value):
    with pytest.raises(ConfigError, match=f"stage '{stage}'.*'{param}'"):
        load_pipeline_config([{"stage": stage, param: value}])


def test_unknown_key_in_a_pipeline_file_names_key_and_file_and_exits_2(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "a b c"}) + "\n")
    config = tmp_path / "p.yaml"
    config.write_text("wrokers: 2\nstages:\n  - {stage: clean}\n")
    assert main(["curate", str(config), "--input", str(data), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{config}: unknown pipeline config key 'wrokers'" in err and len(err.strip().splitlines()) == 1
    config.write_text("stages:\n  - {stage: clean}\ninputs:\n  - {path: d.jsonl, datset: x}\n")
    with pytest.raises(ConfigError, match=r"p.yaml: unknown pipeline config key 'inputs\[0\].datset'"):
        load_pipeline_config(config)


def test_overrides_go_through_the_training_configs_parser_and_presets_through_its_lookup(capsys):
    """One parser: 5e-1 is a number here as in `trident train` (YAML alone reads it as text); one lookup:
    a preset name works for pipelines and blend source files as for training configs."""
    cfg = load_pipeline_config("curate-cc", ["stages.langid.threshold=5e-1", "stages=[{stage: clean}]"])
    assert cfg.stages == [{"stage": "clean"}]
    cfg = load_pipeline_config("curate-cc", ["stages.langid.threshold=5e-1", "workers=0"])
    assert cfg.stages[1]["threshold"] == 0.5 and cfg.workers == 0
    with pytest.raises(ConfigError, match="not found; did you mean .curate-cc.. \\(presets: .*curate-cc"):
        load_pipeline_config("curate-xx")
    assert main(["curate", "blend", "--sources", "blend-mtnlg", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sources"]


def test_defaults_live_in_the_dataclass_and_the_file_keeps_its_values():
    from dataclasses import asdict

    from trident.curate.run.config import CurationConfig

    assert asdict(load_pipeline_config(STAGES)) == {**asdict(CurationConfig()), "stages": STAGES}
    cc = load_pipeline_config("curate-cc")
    assert (cc.dataset, cc.executor, cc.workers, cc.strict) == ("cc", "local", 1, False)
    assert cc.settings()["stages"] == cc.stages and "inputs" not in cc.settings()
