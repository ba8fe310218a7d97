"""`trident lm-eval` exactly as documented: every argument reaches the installed lm-evaluation-harness
(with `run` put in front where its CLI has subcommands), and device / batch_size are accepted in
--model_args, as the harness's own flags, or both (model_args win) without a duplicate-keyword error."""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import subprocess
import sys

import pytest

from eval_fixtures import HARNESS_MC_TASK, HARNESS_OFFLINE_ENV, write_harness_mc_data
from trident.commands.lm_eval import harness_argv

def _write_task(root, text: str):
    """A 3-way multiple-choice harness task over sentences of text, from a local JSON file."""
    data = write_harness_mc_data(root / "mc.jsonl", text)
    (root / "tasks").mkdir()
    (root / "tasks" / "tiny_mc.yaml").write_text(HARNESS_MC_TASK.format(data=data, metrics="  - metric: acc\n"))
    return root / "tasks"


def _lm_eval(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trident", "lm-eval", *args], capture_output=True, text=True,
                          timeout=200, env=dict(os.environ, **HARNESS_OFFLINE_ENV), cwd=cwd)


@pytest.mark.timeout(10)
def test_arguments_go_to_the_harness_entry_point_of_its_version():
    documented = ["--model", "trident", "--model_args", "checkpoint=C,device=cpu,batch_size=8", "--tasks", "piqa"]
    assert harness_argv(documented, has_subcommands=True) == ["run", *documented]  # lm-eval with `run`, `ls`, ...
    assert harness_argv(documented, has_subcommands=False) == documented  # earlier 0.4.x: flags only
    assert harness_argv(["ls", "tasks"], has_subcommands=True) == ["ls", "tasks"]
    assert harness_argv(["--help"], has_subcommands=True) == ["--help"]


@pytest.mark.timeout(300)
def test_model_args_and_harness_flags_both_set_device_and_batch_size(trained_checkpoint):
    from trident.evaluate.lm_eval_model import TridentLM

    path = trained_checkpoint[0]
    # lm-eval 0.4.13's CLI parses --model_args to a dict and always adds its own batch_size and device
    lm = TridentLM.create_from_arg_obj({"checkpoint": str(path), "device": "cpu", "batch_size": 8},
                                       {"batch_size": 1, "max_batch_size": None, "device": "cuda:0"})
    assert lm.scorer.batch_size == 8 and str(lm.scorer.device) == "cpu"
    lm = TridentLM.create_from_arg_string(f"checkpoint={path}", {"batch_size": "3", "device": "cpu"})
    assert lm.scorer.batch_size == 3
    with pytest.raises(ValueError, match="batch_size must be a whole number"):
        TridentLM.create_from_arg_string(f"checkpoint={path},batch_size=auto")


@pytest.mark.timeout(300)
def test_the_documented_command_line_runs_verbatim(trained_checkpoint, tmp_path, monkeypatch):
    """One harness run through trident's command line (in this process: its torch and harness imports are
    loaded already): the README's line, plus the local task folder; the harness passes its own batch_size
    and device beside model_args'. A wrong flag gets the harness's usage error and exit code 2 from
    `python -m trident`. The harness's index of its ~14k built-in task files (18 s of CPU, none of them
    used here) is left out: its TaskManager reads only the local folder."""
    import datasets
    from lm_eval.tasks import TaskManager

    from trident.cli import main

    path, _, text = trained_checkpoint
    tasks = _write_task(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", sys.argv)  # `trident lm-eval` hands the harness its own argv
    for key, value in HARNESS_OFFLINE_ENV.items():  # the harness sets TOKENIZERS_PARALLELISM itself: put back
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # read at import: the variable alone is too late
    monkeypatch.setattr(TaskManager, "__init__", functools.partialmethod(TaskManager.__init__, include_defaults=False))
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        code = main(["lm-eval", "--model", "trident", "--model_args", f"checkpoint={path},device=cpu,batch_size=8",
                     "--tasks", "tiny_mc", "--include_path", str(tasks), "--output_path", str(tmp_path / "out")])
    assert code == 0
    assert "tiny_mc" in table.getvalue()  # the harness's own results table
    (results_file,) = (tmp_path / "out").rglob("results_*.json")
    assert 0.0 <= json.loads(results_file.read_text())["results"]["tiny_mc"]["acc,none"] <= 1.0
    wrong = _lm_eval(["--model", "trident", "--no-such-flag"], tmp_path)
    assert wrong.returncode == 2 and "--no-such-flag" in wrong.stderr  # the harness's own usage error
