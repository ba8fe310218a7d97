"""TensorBoard and Weights & Biases see exactly what metrics.jsonl records, step by step."""
import json
import time

import pytest

from train_fixtures import VOCAB, RandomTokens, tiny_config


def _train(tmp_path, *overrides):
    from trident.train.trainer import Trainer

    config = tiny_config("train.steps=4", "train.eval_interval=2", "train.eval_iters=1", *overrides)
    data = RandomTokens(config.model.seq_length)
    Trainer(config, tmp_path, datasets=(data, data), vocab_size=VOCAB, log=lambda *a: None).train()
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(120)
def test_tensorboard_events_equal_metrics_jsonl_value_by_value(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = _train(tmp_path, "logging.tensorboard=true")
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    expected = {}
    for record in records:
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and value is not None:
                expected.setdefault(key, []).append((record["step"], float(value)))
    assert {"loss", "lr", "grad_norm", "mfu", "val_loss", "skipped"} <= set(expected)
    assert set(events.Tags()["scalars"]) == set(expected)
    for key, points in expected.items():
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert [s for s, _ in logged] == [s for s, _ in points], key
        assert [v for _, v in logged] == pytest.approx([v for _, v in points], rel=1e-6), key  # float32 in TB
    config_text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "num_layers" in config_text and "tensorboard: true" in config_text


@pytest.mark.timeout(180)
def test_wandb_offline_run_logs_the_same_metrics(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    logged = []
    real_log = wandb.sdk.wandb_run.Run.log

    def spy(run, data, step=None, **kwargs):  # what trident hands W&B, step by step
        logged.append((step, dict(data)))
        return real_log(run, data, step=step, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", spy)
    records = _train(tmp_path, "logging.wandb_project=trident-test", "logging.wandb_mode=offline")
    assert [step for step, _ in logged] == [r["step"] for r in records]
    for (_, data), record in zip(logged, records):
        expected = {k: float(v) for k, v in record.items() if k != "step" and isinstance(v, (int, float))}
        assert data == expected
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1  # written without network, for `wandb sync` later
    deadline = time.time() + 60  # wandb's service process may still be flushing the run file
    while b"val_loss" not in runs[0].read_bytes() and time.time() < deadline:
        time.sleep(0.5)
    stored = runs[0].read_bytes()
    assert b"val_loss" in stored and b"trident-test" in stored


def test_missing_logger_package_is_a_config_error(monkeypatch):
    import builtins

    from trident.config import ConfigError
    from trident.train.loggers import build_loggers

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ConfigError, match=r"pip install 'trident-lm\[wandb\]'"):
        build_loggers(tiny_config("logging.wandb_project=p"), "/tmp/unused-loggers")
