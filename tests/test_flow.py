"""`trident run FLOW.yaml`: a tiny flow end to end, then reruns that skip what is unchanged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trident.cli import main
from trident.curate.samples import reference_articles, write_sample_warc
from trident.evaluate.heldout import write_heldout_tasks

STAGES = ["curate:web", "curate:books", "tokenizer", "tokenize:web", "tokenize:books", "train", "eval", "report"]


def _flow(tmp: Path, steps: int) -> Path:
    if not (tmp / "raw").exists():  # inputs written once: a rewrite is a new input (new mtime)
        articles = reference_articles()
        (tmp / "raw").mkdir()
        books = tmp / "raw" / "books.jsonl"
        books.write_text("".join(json.dumps({"text": text}) + "\n" for text in articles[:12]))
        write_sample_warc(tmp / "raw" / "crawl.warc.gz", n_docs=12, seed=0)
        write_heldout_tasks(articles[-8:], tmp / "eval_data", n_examples=8, seed=0, passage_words=12,
                            context_words=8, ending_words=4)
    flow = {"sources": [{"name": "web", "paths": ["raw/*.warc.gz"], "weight": 0.3},
                        {"name": "books", "paths": "raw/books.jsonl", "weight": 0.7}],
            "curate": {"config": "curate-cc", "overrides": ["stages.min_length.min_tokens=32"], "progress": False},
            "tokenizer": {"vocab_size": 300},
            "train": {"config": "tiny", "overrides": ["model.seq_length=128", f"train.steps={steps}"], "nproc": 1},
            "eval": {"tasks": ["lambada", "hellaswag"], "shots": [0, 1], "data_dir": "eval_data"},
            "sample": {"prompt": "The", "max_new_tokens": 8}}
    path = tmp / "flow.yaml"
    path.write_text(yaml.safe_dump(flow))
    return path


def _run(flow: Path, out: Path, capsys) -> dict:
    capsys.readouterr()
    assert main(["run", str(flow), "--out", str(out), "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture
def commands_in_process(monkeypatch):
    """The flow's `trident train` and `trident eval` stages run through trident.cli.main in this process
    instead of a fresh interpreter each (~3 s of CPU for `import torch` apiece): these tests are about
    which stages run; test_demo.py runs them as child processes, as a user's flow does."""
    import signal

    from trident.flow import stages
    from trident.flow.spec import FlowError
    from trident.train.preemption import STOP_SIGNALS

    def in_process(args: list[str]) -> None:
        if main(args):
            raise FlowError(f"`trident {args[0]}` failed")

    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}  # `trident train` catches stop signals
    monkeypatch.setattr(stages, "_trident", in_process)
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def test_flow_runs_end_to_end_reruns_only_what_changed_and_resumes_a_killed_stage(tmp_path, capsys,
                                                                                   commands_in_process):
    out = tmp_path / "out"
    first = _run(_flow(tmp_path, steps=4), out, capsys)
    assert first["ran"] == STAGES
    report = (out / "report.md").read_text()
    for part in ("![loss](loss.png)", "## Sample", "## Curation", "[web](curated/web/report.md) | 0.3 |",
                 "## Evaluation", "| lambada | acc |"):
        assert part in report, part
    assert (out / "loss.png").exists() and json.loads((out / "eval" / "results.json").read_text())["results"]
    assert _run(_flow(tmp_path, steps=4), out, capsys)["ran"] == []

    for stage in ("train", "eval"):  # killed inside train: it resumes from its checkpoint, not from step 0
        stamp = json.loads((out / ".flow" / f"{stage}.json").read_text())
        (out / ".flow" / f"{stage}.json").write_text(json.dumps({**stamp, "done": False}))
    checkpoint = next((out / "train" / "checkpoints").glob("step_*"))
    assert _run(_flow(tmp_path, steps=4), out, capsys)["ran"] == ["train", "eval"]
    assert checkpoint.exists()

    changed = _run(_flow(tmp_path, steps=6), out, capsys)
    assert changed["ran"] == ["train", "eval", "report"]
    assert json.loads((out / "train" / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 6
    bad = tmp_path / "bad.yaml"  # a bad flow is one line
    bad.write_text(yaml.safe_dump({"sources": [{"name": "x", "paths": ["nothing/*.jsonl"]}]}))
    assert main(["run", str(bad), "--out", str(out)]) == 1
    assert "matches no file" in capsys.readouterr().err


@pytest.mark.parametrize("weight", [0, -1])
def test_weights_must_be_positive(tmp_path, weight):
    from trident.flow.spec import FlowError, load_flow

    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "f.yaml").write_text(yaml.safe_dump({"sources": [{"paths": "a.jsonl", "weight": weight}]}))
    with pytest.raises(FlowError, match="weight"):
        load_flow(tmp_path / "f.yaml")


def test_report_counts_each_step_once_after_a_resume(tmp_path):
    from trident.flow.report_page import write_report

    logged = [{"step": s, "tokens": 64 * s, "loss": 5.0 - s / 10} for s in (1, 2, 3, 4, 3, 4, 5)]  # resumed at 2
    summary = {"metrics": logged, "documents": 1, "tokens": 320, "vocab_size": 300, "parameters": 10,
               "config": "tiny", "train_seconds": 1.0, "prompt": "a", "sample": "b"}
    text = write_report(tmp_path, summary).read_text()
    assert "5 steps in" in text and "| last | 5 | 320 |" in text


def test_unknown_flow_keys_are_refused_naming_key_and_file(tmp_path, capsys):
    from trident.cli import main

    (tmp_path / "a.jsonl").write_text("{}\n")
    for flow, named in (({"sources": [{"paths": "a.jsonl"}], "trian": {}}, "unknown flow file key 'trian'"),
                        ({"sources": [{"paths": "a.jsonl", "wieght": 2}]}, "unknown flow file key 'sources[0].wieght'"),
                        ({"sources": [{"paths": "a.jsonl"}], "train": {"nprocs": 2}},
                         "unknown flow file key 'train.nprocs'")):
        (tmp_path / "f.yaml").write_text(yaml.safe_dump(flow))
        assert main(["run", str(tmp_path / "f.yaml"), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert named in err and str(tmp_path / "f.yaml") in err


def test_flow_values_are_typed_and_mistakes_exit_2_naming_key_and_file(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text("{}\n")
    for flow, named in (({"sources": [{"paths": "a.jsonl", "weight": 0}]}, "'sources[0].weight': expected a number > 0"),
                        ({"sources": [{"paths": "a.jsonl", "curate": {"worker": 2}}]},
                         "unknown flow file key 'sources[0].curate.worker'"),
                        ({"sources": [{"generate": "sample-wark"}]}, "'sources[0].generate.kind': expected one of"),
                        ({"sources": [{"paths": "a.jsonl"}], "eval": {"shots": "0,1"}}, "'eval.shots': expected list"),
                        ({"sources": [{"paths": "a.jsonl"}], "train": {"nproc": 0}}, "'train.nproc'")):
        (tmp_path / "f.yaml").write_text(yaml.safe_dump(flow))
        assert main(["run", str(tmp_path / "f.yaml"), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert named in err and str(tmp_path / "f.yaml") in err and len(err.strip().splitlines()) == 1


def test_help_lists_exactly_the_keys_a_flow_file_accepts_with_their_defaults(capsys):
    from trident.commands.run import flow_keys_help
    from trident.config.flow import FlowConfig
    from trident.config.typed import known_keys
    from trident.flow.spec import load_flow

    text = " ".join(flow_keys_help().split())
    keys = known_keys(FlowConfig)
    for key, default in keys:
        section, _, rest = key.partition(".")
        assert f"{section}:" in text and (rest in text if default in ("", [], None) else f"{rest}=" in text), key
    assert "vocab_size=2048" in text and "config=curate-cc" in text and 'tasks=["lambada"]' in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "heldout.n_examples=64" in " ".join(capsys.readouterr().out.split())
    raw = {"sources": [{"generate": {"kind": "stdlib-docstrings", "holdout_every": 4}, "curate": {"workers": 2}}],
           "eval": {"heldout": {"source": "source0"}}, "train": {"nproc": 2}}
    flow = load_flow(Path("f.yaml"), raw)  # a source's own curation settings over the flow's defaults
    assert flow.curate_of(flow.sources[0]).workers == 2 and flow.curate.workers == 1 and flow.train.config == "tiny"


def test_the_packaged_demo_flow_loads_with_its_values():
    from trident.commands.demo import DEMO_FLOW
    from trident.flow.spec import load_flow

    flow = load_flow(DEMO_FLOW)
    web = flow.curate_of(flow.sources[1])
    assert (web.config, web.overrides, web.workers, web.progress) == ("curate-cc", ["stages.min_length.min_tokens=64"],
                                                                     2, False)
    assert flow.sources[0].generate.holdout_every == 20 and flow.eval.heldout.n_examples == 64
    assert (flow.eval.batch_size, flow.eval.shots, flow.sample.max_new_tokens) == (16, [0, 1], 60)


def test_a_curation_mistake_is_found_before_any_stage_runs(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text("{}\n")
    flow = {"sources": [{"paths": "a.jsonl", "curate": {"overrides": ["stages.min_length.min_tokens=abc"]}}]}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(flow))
    assert main(["run", str(tmp_path / "f.yaml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "sources[0] (source0): curate:" in err and "min_tokens" in err and str(tmp_path / "f.yaml") in err
    assert not (tmp_path / "out" / ".flow").exists()
