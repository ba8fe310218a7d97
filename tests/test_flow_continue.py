"""A flow that continues an open model (issue 56 item 4): `train: {from: HF_DIR}` imports the model, tokenizes
the curated text with the model's own tokenizer (none trained), trains from its weights with the
continue preset, and report.md sets the base model's scores beside the continued model's."""
import json

import pytest
import yaml

from flow_fixtures import PIPELINE, run_main, stages_in_process, write_site
from open_model_fixtures import make_model
from trident.checkpoint.reader import complete_checkpoints
from trident.data.tokenizer import Tokenizer


@pytest.mark.timeout(240)
def test_a_flow_continues_an_imported_model_with_its_own_tokenizer(tmp_path):
    make_model("gpt2", tmp_path / "gpt2-tiny")
    write_site(tmp_path)
    flow = {"sources": [{"name": "docs", "paths": "site/*.html"}], "curate": {"config": PIPELINE},
            "train": {"from": "gpt2-tiny", "overrides": ["train.steps=2", "train.global_batch_size=4",
                                                         "train.peak_tflops=1", "model.seq_length=32"]},
            "eval": {"tasks": ["lambada"], "heldout": {"source": "docs", "every": 3, "n_examples": 8}},
            "sample": {"max_new_tokens": 4}}
    (tmp_path / "flow.yaml").write_text(yaml.safe_dump(flow))
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp, stages_in_process(mp):
        run = run_main(["run", str(tmp_path / "flow.yaml"), "--out", str(out), "--json"])
    assert run["code"] == 0, run["err"]
    ran = json.loads(run["out"].strip().splitlines()[-1])["ran"]
    assert {"start", "train", "eval", "eval:untrained"} <= set(ran)
    assert not (out / "tokenizer.json").exists()  # no tokenizer was trained: the model's own is used
    model_tokenizer = Tokenizer.load(out / "start" / "step_0000000" / "tokenizer.json")
    stats = json.loads((out / "data" / "docs.stats.json").read_text())
    assert stats["tokenizer_fingerprint"] == model_tokenizer.fingerprint()
    trained = complete_checkpoints(out / "train" / "checkpoints")[-1]
    assert (trained / "tokenizer.json").read_bytes() == (tmp_path / "gpt2-tiny" / "tokenizer.json").read_bytes()
    config = yaml.safe_load((out / "train" / "config.yaml").read_text())
    assert config["model"]["hidden_size"] == 32 and config["model"]["activation"] == "gelu_new"  # the model's
    assert config["train"]["lr"] == 3.0e-5 and config["model"]["seq_length"] == 32  # continue preset, own choice
    report = (out / "report.md").read_text()
    assert "| task | metric | n | base model (gpt2-tiny) 0-shot | 0-shot |" in report
    base = json.loads((out / "eval-untrained" / "results.json").read_text())
    assert base["results"]["lambada"]["0"]["metrics"]  # scored on the imported weights


def test_a_flow_from_something_that_is_no_model_exits_2_before_any_stage(tmp_path):
    write_site(tmp_path)
    (tmp_path / "nothing").mkdir()
    flow = {"sources": [{"name": "docs", "paths": "site/*.html"}], "train": {"from": "nothing"}, "eval": "none"}
    (tmp_path / "flow.yaml").write_text(yaml.safe_dump(flow))
    run = run_main(["run", str(tmp_path / "flow.yaml"), "--out", str(tmp_path / "out")])
    assert run["code"] == 2 and "'train.from'" in run["err"] and not (tmp_path / "out" / "curated").exists()
