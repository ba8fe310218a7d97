"""`trident run FLOW.yaml`: a tiny flow end to end, then reruns that skip what is unchanged."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from flow_fixtures import PIPELINE, TINY, run_main, stages_in_process, write_site
from trident.cli import main
from trident.curate.samples.crawl import reference_articles, write_sample_warc
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
    """The flow's --json summary, with what it printed (`said`)."""
    capsys.readouterr()
    assert main(["run", str(flow), "--out", str(out), "--json"]) == 0
    said = capsys.readouterr()
    return {**json.loads(said.out.strip().splitlines()[-1]), "said": said.out + said.err}


@pytest.fixture
def commands_in_process(monkeypatch):
    with stages_in_process(monkeypatch):
        yield


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
    results = (out / "eval" / "results.json").read_bytes()
    # the resumed train has no step left; eval runs again and rewrites results.json; the report is remade
    # when that changed it (its "created" second: the same when the two evals end within one second)
    remade = _run(_flow(tmp_path, steps=4), out, capsys)["ran"]
    changed = (out / "eval" / "results.json").read_bytes() != results
    assert remade == ["train", "eval"] + (["report"] if changed else [])
    assert checkpoint.exists()

    changed = _run(_flow(tmp_path, steps=6), out, capsys)
    assert changed["ran"] == ["train", "eval", "report"]
    assert json.loads((out / "train" / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 6
    assert f"trident train: removed what its earlier run wrote in {out / 'train'}: " in changed["said"]
    assert re.search(f"checkpoints/ \\([^)]*{checkpoint.name}", changed["said"])  # what the fresh start deleted

    # another command replaced a finished stage's output: the rerun notices, says so and makes it again
    web = (out / "data" / "web.bin").read_bytes()
    curate = ["curate", "curate-cc", "--input", str(tmp_path / "raw" / "books.jsonl"), "--out",
              str(out / "curated" / "web"), "--overwrite", "stages.min_length.min_tokens=32", "progress=false"]
    assert main(curate) == 0
    assert "trident curate: removed what its earlier run wrote in" in capsys.readouterr().err
    again = _run(_flow(tmp_path, steps=6), out, capsys)
    assert again["ran"][0] == "curate:web" and "train" not in again["ran"]  # curated again as before
    assert "curate:web: its outputs changed since it ran (curated/web/shard-00000.jsonl.zst replaced)" in again["said"]
    assert (out / "data" / "web.bin").read_bytes() == web


def test_a_glob_that_matches_no_file_exits_2_naming_source_and_glob_before_any_stage(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "words " * 40}) + "\n")
    (tmp_path / "nothing").mkdir()  # a folder the glob matches is not a file
    for paths in (["nothing/*.jsonl"], ["nothing"], "missing.jsonl"):
        flow = tmp_path / "bad.yaml"
        flow.write_text(yaml.safe_dump({"sources": [{"name": "ok", "paths": "a.jsonl"},
                                                    {"name": "crawl", "paths": paths}], "eval": "none"}))
        assert main(["run", str(flow), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        glob = paths if isinstance(paths, str) else paths[0]
        assert "'crawl'" in err and f"{glob!r} matches no file" in err and str(flow) in err, err
        assert not (tmp_path / "out" / ".flow").exists() and not (tmp_path / "out" / "curated").exists()


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
    summary = {"metrics": logged, "parameters": 10, "config": "tiny", "stage_seconds": 7.3, "step_seconds": 1.0,
               "prompt": "a", "sample": "b"}
    text = write_report(tmp_path, summary).read_text()
    assert "5 steps; the train stage took 7.3 s of wall clock" in text and "| last | 5 | 320 |" in text
    assert "1.0 s of it in training steps" in text  # the stage log's clock, and the steps' share of it


def test_unknown_flow_keys_are_refused_naming_key_and_file(tmp_path, capsys):
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


# ---- a user's own text (local HTML pages), the first time ------------------------------------------------------

def _own_flow(root: Path, evaluation, train=(), curate=()) -> Path:
    flow = {"sources": [{"name": "docs", "paths": "site/*.html"}],
            "curate": {"config": PIPELINE, "overrides": list(curate)}, "tokenizer": {"vocab_size": 300},
            "train": {"config": "tiny", "overrides": [*TINY, *train]}, "eval": evaluation,
            "sample": {"max_new_tokens": 4}}
    path = root / "flow.yaml"
    path.write_text(yaml.safe_dump(flow))
    return path


def _unreachable_hub(mp: pytest.MonkeyPatch) -> None:
    """The hub's endpoint at a port nothing listens on: refused at once, no network, no retries."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        mp.setenv("HF_ENDPOINT", f"http://127.0.0.1:{probe.getsockname()[1]}")
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRIDENT_HUB_DIR", "HTTPS_PROXY", "https_proxy",
                 "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        mp.delenv(name, raising=False)


@pytest.fixture(scope="module")
def own_text(tmp_path_factory):
    """One output folder, three runs of a flow over local HTML: evaluation on tasks built from the pages'
    own held-out documents; then on tasks from an unreachable hub (the eval stage fails); then on no tasks."""
    from trident.curate.filters.holdout import held_out_texts
    from trident.curate.read.shards import read_shard

    root = tmp_path_factory.mktemp("own")
    write_site(root)
    out, runs = root / "out", {}
    with pytest.MonkeyPatch.context() as mp, stages_in_process(mp):
        heldout = {"tasks": ["lambada", "hellaswag"], "heldout": {"source": "docs", "every": 3, "n_examples": 8}}
        runs["heldout"] = run_main(["run", str(_own_flow(root, heldout)), "--out", str(out), "--json"])
        curated = out / "curated" / "docs"
        runs["heldout"].update(held=held_out_texts(curated), stats=json.loads((curated / "stats.json").read_text()),
                               trained=[d.text for s in sorted(curated.glob("shard-*")) for d in read_shard(s)],
                               lambada=(out / "eval_data" / "lambada" / "lambada_test.jsonl").read_text(),
                               report=(out / "report.md").read_text())
        _unreachable_hub(mp)
        runs["hub"] = run_main(["run", str(_own_flow(root, {"tasks": ["lambada"]})), "--out", str(out)])
        runs["hub"].update(report=(out / "report.md").read_text(), stamped=(out / ".flow" / "report.json").exists())
        runs["none"] = run_main(["run", str(_own_flow(root, {"tasks": []})), "--out", str(out), "--json"])
        runs["none"]["report"] = (out / "report.md").read_text()
        fresh = root / "out-none"  # `eval: none` in a folder of its own: every other stage runs
        runs["fresh"] = run_main(["run", str(_own_flow(root, "none")), "--out", str(fresh), "--json"])
        runs["fresh"].update(report=(fresh / "report.md").read_text(), steps=(fresh / "train" / "metrics.jsonl"))
    return out, runs


def test_tasks_built_from_a_users_own_pages_hold_their_documents_out_of_training(own_text):
    _, runs = own_text
    run = runs["heldout"]
    assert run["code"] == 0, run["err"]
    ran = json.loads(run["out"].strip().splitlines()[-1])["ran"]
    assert ran[:2] == ["curate:docs", "heldout"] and "eval" in ran
    holdout = next(s["counters"] for s in run["stats"]["stages"] if s["name"] == "holdout")
    assert holdout["dropped:held_out"] == len(run["held"]) >= 4 and holdout["out"] == len(run["trained"])
    assert not set(run["held"]) & set(run["trained"])  # no held-out text is trained on
    passages = [json.loads(line)["text"] for line in run["lambada"].splitlines()]
    held = " ".join(" ".join(run["held"]).split())
    assert passages and all(p in held for p in passages)  # the tasks are cut from the held-out pages
    assert "| lambada | acc |" in run["report"] and "| hellaswag | acc |" in run["report"]
    assert len(run["stats"]["output"]["shards"]) == 1  # 24 small pages read into one shard, not 24
    assert "\r" not in run["out"] + run["err"] and "extract+clean: 1/1 task (100%)" in run["err"]


def test_an_unreachable_hub_says_how_to_give_data_or_skip_eval_and_the_report_covers_the_stages_before(own_text):
    _, runs = own_text
    run = runs["hub"]
    assert run["code"] == 1
    hint = next(line for line in run["err"].splitlines() if line.startswith("trident run: error:"))
    assert "Hugging Face hub" in hint and "eval.data_dir" in hint and "`eval: none`" in hint
    report = run["report"]
    assert "stopped at its `eval` stage" in report and "hub cannot be reached" in report
    assert "| [docs](curated/docs/report.md) | 1 | 24 |" in report and "2 steps; the train stage took" in report
    assert "Not run: the flow stopped before its eval stage finished." in report
    assert not run["stamped"]  # the next run writes the report stage's own report.md, whatever its key


def test_no_eval_tasks_skip_evaluation_and_the_report_says_so(own_text):
    _, runs = own_text
    run = runs["none"]
    assert run["code"] == 0, run["err"]
    assert json.loads(run["out"].strip().splitlines()[-1])["ran"] == ["report"]  # nothing else changed
    assert "== eval: skipped (the flow file gives no evaluation tasks) ==" in run["out"]
    assert "Skipped: the flow file gives no evaluation tasks" in run["report"] and "stopped" not in run["report"]


def test_a_flow_with_eval_none_runs_every_other_stage_end_to_end(own_text):
    run = own_text[1]["fresh"]
    assert run["code"] == 0, run["err"]
    assert json.loads(run["out"].strip().splitlines()[-1])["ran"] == ["curate:docs", "tokenizer", "tokenize:docs",
                                                                      "train", "report"]
    assert [json.loads(line)["step"] for line in run["steps"].read_text().splitlines()] == [1, 2]
    report = run["report"]
    assert "Skipped: the flow file gives no evaluation tasks" in report and "## Sample" in report
    assert "| [docs](curated/docs/report.md) | 1 | 24 |" in report and "stopped" not in report


def test_data_which_on_a_flow_folder_answers_for_its_training_run(own_text, tmp_path):
    out, _ = own_text
    answer = run_main(["data", "which", str(out), "--step", "1", "--json"])
    assert answer["code"] == 0 and f"its training run is {out / 'train'}" in answer["err"]
    assert json.loads(answer["out"]) == json.loads(run_main(["data", "which", str(out / "train"), "--step", "1",
                                                         "--json"])["out"])
    (tmp_path / "early" / ".flow").mkdir(parents=True)  # a flow folder whose train stage has not run
    early = run_main(["data", "which", str(tmp_path / "early"), "--step", "1"])
    assert early["code"] == 2 and str(tmp_path / "early" / "train") in early["err"]


def test_every_stage_mistake_is_refused_before_any_stage_runs_naming_key_and_file(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}\n")
    source = {"name": "docs", "paths": "a.jsonl"}
    cases = [({"curate": {"overrides": ["stages.min_lenght.min_tokens=3"]}}, "'min_lenght' must name exactly one"),
             ({"train": {"overrides": ["train.stpes=30"]}}, "unknown config key 'train.stpes'"),
             ({"eval": {"tasks": ["lambda"]}}, "unknown task 'lambda'"),
             ({"eval": {"tasks": ["lambada"], "data_dir": "nowhere"}}, "nowhere is not a folder"),
             ({"eval": {"heldout": {"source": "web", "every": 5}}}, "'web' names no source"),
             ({"eval": {"heldout": {"source": "docs"}}}, "eval.heldout.every: give N"),
             ({"eval": {"tasks": ["piqa"], "heldout": {"source": "docs", "every": 5}}},
              "cannot be built from held-out"),
             ({"sources": [{**source, "decontaminate": True}], "eval": "none"},  # `none`: no tasks
              "decontaminate: true needs")]
    for change, named in cases:
        (tmp_path / "f.yaml").write_text(yaml.safe_dump({"sources": [source], **change}))
        result = run_main(["run", str(tmp_path / "f.yaml"), "--out", str(tmp_path / "out")])
        assert result["code"] == 2 and named in result["err"] and str(tmp_path / "f.yaml") in result["err"], change
        assert not (tmp_path / "out").exists()  # refused before any stage ran


def test_a_stage_command_that_refuses_its_input_makes_the_flow_exit_2_too():
    """A stage's child exits 2 for a mistake in its input (as `trident train` does for an unknown preset):
    the flow raises StageRefused, a ConfigError, so `trident run` exits 2 as the command did, not 1."""
    from trident.config import ConfigError
    from trident.flow import stages
    from trident.flow.spec import StageRefused

    with pytest.raises(StageRefused, match="exit status 2") as refused:
        stages._trident(["train", "no-such-preset"], capture_output=True)
    assert isinstance(refused.value, ConfigError)
