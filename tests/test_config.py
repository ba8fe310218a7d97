"""Config: YAML + dotted overrides into typed dataclasses; mistakes fail at start naming the key."""
import pytest

from trident.config import ConfigError, load_config, parse_overrides, save_config


def test_presets_load_and_validate():
    for name in ("tiny", "demo", "gpt-125m", "gpt-1.3b"):
        load_config(name).validate(1)
    mtnlg = load_config("configs/mtnlg-530b.yaml")
    mtnlg.validate(2240)  # TP 8 x PP 35 x DP 8, the paper's 280 nodes
    assert (mtnlg.model.num_layers, mtnlg.model.hidden_size, mtnlg.model.num_heads) == (105, 20480, 128)
    assert mtnlg.model.padded_vocab_size(8) == 51200
    assert mtnlg.train.adam_beta2 == 0.95 and mtnlg.train.rampup_batch_size == [32, 32, 12000000000]
    assert len(mtnlg.data.paths) == 30 and abs(sum(mtnlg.data.paths[0::2]) - 1.0) < 0.01


def test_a_folder_named_like_a_preset_does_not_hide_it(tmp_path, monkeypatch):
    (tmp_path / "demo").mkdir()  # e.g. `trident demo --out demo` run before, in this working folder
    monkeypatch.chdir(tmp_path)
    from trident.config.typed import PRESET_DIR

    assert load_config("demo").to_dict() == load_config(str(PRESET_DIR / "demo.yaml")).to_dict()


def test_a_preset_is_found_without_reading_every_preset_again(monkeypatch):
    """Every test, rank and command loads a preset: reading all of them each time cost ~0.2 s a call."""
    from trident.config import typed

    load_config("tiny")
    read = []
    monkeypatch.setattr(typed.Path, "read_text", lambda self, *a, **k: read.append(self.name) or "{}")
    load_config("tiny")
    assert read == ["tiny.yaml"]


def test_overrides_are_yaml_and_typed():
    config = load_config("tiny", ["train.lr=3e-4", "data.paths=[0.3,a,0.7,b]", "parallel.sequence_parallel=true",
                                  "train.rampup_batch_size=[2,2,100]"])
    assert config.train.lr == 3e-4 and isinstance(config.train.lr, float)
    assert config.data.paths == [0.3, "a", 0.7, "b"]
    assert config.parallel.sequence_parallel is True
    assert parse_overrides(["a.b.c=1"]) == {"a": {"b": {"c": 1}}}


@pytest.mark.parametrize("overrides,key", [
    (["train.lrr=1"], "unknown config key 'train.lrr'"),
    (["model.num_layers=two"], "config key 'model.num_layers': expected int"),
    (["model.hidden_size=50"], "config key 'model.hidden_size': 50 is not divisible by model.num_heads=4"),
    (["train.global_batch_size=7"], "config key 'train.global_batch_size'"),
    (["train.precision=fp8"], "config key 'train.precision': must be one of"),
    (["parallel.tp=3"], "config key 'parallel.tp'"),
    (["parallel.pp=4"], "config key 'parallel.pp'"),  # 2 layers cannot fill 4 stages
    (["train.min_lr=1.0"], "config key 'train.min_lr'"),
    (["parallel.sequence_parallel=true", "parallel.tp=2", "model.seq_length=33"], "parallel.sequence_parallel"),
    (["parallel.layer_partition=[1,2]", "parallel.pp=2"], "parallel.layer_partition"),
    (["train.rampup_batch_size=[3,1,10]"], "train.rampup_batch_size"),
    (["train"], "must look like section.key=value"),
    (["train=5"], "config key 'train' is a section"),
])
def test_mistakes_fail_at_start_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("(", r"\(")):
        load_config("tiny", overrides).validate(1)


def test_world_size_must_match_the_layout():
    with pytest.raises(ConfigError, match="world size 6 is not divisible by tp x pp = 4"):
        load_config("tiny", ["parallel.tp=2", "parallel.pp=2"]).validate(6)
    with pytest.raises(ConfigError, match="dp x pp x tp = 3 x 1 x 2 = 6 != world size 8"):
        load_config("tiny", ["parallel.tp=2", "parallel.dp=3", "train.global_batch_size=12"]).validate(8)


def test_bad_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {num_layers: [1, 2}\n")
    with pytest.raises(ConfigError, match="bad.yaml.*not valid YAML"):
        load_config(bad)
    bad.write_text("model:\n  depth: 3\n")
    with pytest.raises(ConfigError, match="bad.yaml: unknown config key 'model.depth'"):
        load_config(bad)


def test_resolved_config_round_trips(tmp_path):
    config = load_config("demo", ["train.steps=7"])
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


@pytest.mark.parametrize("override,key", [
    ("train.lr=-1e-3", "train.lr"),
    ("train.lr=0", "train.lr"),
    ("train.min_lr=-1e-5", "train.min_lr"),
    ("train.global_batch_size=0", "train.global_batch_size"),
    ("train.global_batch_size=-8", "train.global_batch_size"),
    ("train.micro_batch_size=-2", "train.micro_batch_size"),
    ("train.micro_batch_size=0", "train.micro_batch_size"),
    ("train.steps=0", "train.steps"),
    ("train.adam_beta1=1.0", "train.adam_beta1"),
    ("train.adam_beta2=1.5", "train.adam_beta2"),
    ("train.adam_beta2=-0.1", "train.adam_beta2"),
    ("train.adam_eps=0", "train.adam_eps"),
    ("train.weight_decay=-0.1", "train.weight_decay"),
    ("train.clip_grad=-1", "train.clip_grad"),
    ("train.warmup_tokens=-5", "train.warmup_tokens"),
    ("train.decay_tokens=-5", "train.decay_tokens"),
    ("train.seed=-1", "train.seed"),
    ("train.eval_interval=-1", "train.eval_interval"),
    ("train.eval_iters=0", "train.eval_iters"),
    ("train.peak_tflops=-1", "train.peak_tflops"),
    ("train.threads=-1", "train.threads"),
    ("train.loss_scale_initial=0", "train.loss_scale_initial"),
    ("train.loss_scale_growth_interval=0", "train.loss_scale_growth_interval"),
    ("train.loss_scale_backoff=1.0", "train.loss_scale_backoff"),
    ("train.loss_scale_backoff=0", "train.loss_scale_backoff"),
    ("train.loss_scale_hysteresis=0", "train.loss_scale_hysteresis"),
    ("train.lr=.nan", "train.lr"),
    ("train.lr=.inf", "train.lr"),
    ("data.valid_fraction=1.5", "data.valid_fraction"),
    ("data.valid_fraction=-0.1", "data.valid_fraction"),
    ("data.split_seed=-1", "data.split_seed"),
    ("model.num_heads=0", "model.num_heads"),
    ("model.vocab_size=-1", "model.vocab_size"),
    ("model.ffn_hidden_size=-4", "model.ffn_hidden_size"),
    ("model.attention_dropout=1.0", "model.attention_dropout"),
    ("model.hidden_dropout=-0.1", "model.hidden_dropout"),
    ("model.layernorm_epsilon=0", "model.layernorm_epsilon"),
    ("model.init_std=-0.02", "model.init_std"),
    ("parallel.dp=-1", "parallel.dp"),
    ("parallel.tp=0", "parallel.tp"),
    ("parallel.bucket_size_mb=0", "parallel.bucket_size_mb"),
    ("parallel.timeout_s=0", "parallel.timeout_s"),
    ("checkpoint.save_interval=-1", "checkpoint.save_interval"),
    ("checkpoint.keep_last=-1", "checkpoint.keep_last"),
    ("logging.log_interval=0", "logging.log_interval"),
])
def test_numeric_ranges_name_the_key(override, key):
    """Every numeric key is range-checked at start, and the message names that key (not a neighbour)."""
    with pytest.raises(ConfigError, match=rf"config key '{key}': must be"):
        load_config("tiny", [override]).validate(1)


def test_layer_partition_entries_must_be_non_negative_ints():
    with pytest.raises(ConfigError, match="parallel.layer_partition"):
        load_config("tiny", ["parallel.pp=2", "parallel.layer_partition=[3,-1]"]).validate(2)


@pytest.mark.parametrize("override", ["train.lr=-1e-3", "train.global_batch_size=0", "data.valid_fraction=1.5",
                                      "train.adam_beta2=1.5", "train.micro_batch_size=-2"])
def test_train_cli_exits_2_on_range_errors(tmp_path, capsys, override):
    from trident.cli import main

    assert main(["train", "tiny", override, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert override.split("=")[0] in err and "Traceback" not in err


def test_unparsable_override_and_unreadable_file_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"override 'train.lr=\[1,': value is not valid YAML"):
        load_config("tiny", ["train.lr=[1,"])
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"model:\n  num_layers: \xff\xfe\n")
    with pytest.raises(ConfigError, match="binary.yaml.*cannot be read"):
        load_config(binary)


def test_typed_sections_lists_unions_and_rules_name_the_exact_key():
    """The one filler every config file goes through (training, curation pipelines, flow files)."""
    from dataclasses import dataclass, field
    from typing import Optional, Union

    from trident.config.typed import fill, known_keys, setting

    @dataclass
    class Part:
        size: int = setting("a positive int", lambda v: v > 0, default=1)

    @dataclass
    class Whole:
        parts: list[Part] = field(default_factory=list)
        extra: Optional[Part] = None
        kind: Union[str, Part] = "plain"
        ratios: list[float] = field(default_factory=list)

    whole = fill(Whole(), {"parts": [{}, {"size": 3}], "extra": {"size": 2}, "kind": {"size": 4}, "ratios": [1, 0.5]})
    assert [p.size for p in whole.parts] == [1, 3] and whole.extra.size == 2 and whole.kind.size == 4
    assert whole.ratios == [1.0, 0.5] and isinstance(whole.ratios[0], float)
    assert fill(Whole(), {"kind": "fancy"}).kind == "fancy"
    for values, message in (({"parts": [{}, {"sise": 3}]}, "unknown thing key 'parts[1].sise'"),
                            ({"parts": [{"size": 0}]}, "thing key 'parts[0].size': expected a positive int, got 0"),
                            ({"ratios": [1, "x"]}, "thing key 'ratios[1]': expected float, got 'x'"),
                            ({"kind": 5}, "thing key 'kind': expected str or a mapping, got 5"),
                            ({"extra": [1]}, "thing key 'extra': expected a mapping or null")):
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            fill(Whole(), values, name="thing")
    assert known_keys(Whole) == [("parts[].size", 1), ("extra.size", 1), ("kind.size", 1), ("ratios", [])]


@pytest.mark.parametrize("feature", [["train.compile=true"], ["eval.tasks=[lambada]", "eval.interval=10"]])
def test_zero3_combines_with_compile_and_in_training_evaluation(feature):
    load_config("tiny", ["parallel.zero_stage=3", "parallel.dp=2", *feature]).validate(2)  # tests/test_zero3_features.py


def test_dp_shard_counts_the_gradient_group_dp_x_cp(tmp_path, capsys):
    """With cp > 1 gradients are reduced over dp x cp ranks (parallel/hybrid.py cuts that group), so
    dp_shard must divide dp x cp, not dp; dp_shard = dp x cp is plain ZeRO, as 0 is."""
    from trident.cli import main

    cp2 = ["parallel.cp=2", "parallel.dp=2"]
    load_config("tiny", [*cp2, "parallel.dp_shard=4"]).validate(4)  # the whole group: plain ZeRO, any stage
    load_config("tiny", ["parallel.cp=2", "parallel.dp_shard=2", "parallel.zero_stage=2"]).validate(2)  # dp 1
    assert main(["train", "tiny", *cp2, "parallel.dp_shard=3", "parallel.zero_stage=3", "--nproc", "4",
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "parallel.dp_shard" in err and "3 does not divide parallel.dp x parallel.cp = 2 x 2 = 4" in err
    assert "Traceback" not in err
