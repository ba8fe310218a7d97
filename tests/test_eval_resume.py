"""`trident eval` checks every task/shot cell before scoring (exit 2, nothing loaded or written), and
a run that fails midway leaves results.json marked partial, which a rerun resumes without --overwrite."""
from __future__ import annotations

import json

import pytest

import trident.evaluate.harness as harness
from eval_fixtures import FIXTURES, save_trident_checkpoint, tiny_tokenizer
from trident.cli import main


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return save_trident_checkpoint(tiny_tokenizer(root), root)[0]


def _count_cells(monkeypatch, fail_at: int | None = None) -> list[str]:
    """Record every cell harness.evaluate_task scores; raise on cell number fail_at (1-based)."""
    scored, real = [], harness.evaluate_task

    def counting(lm, task, shots, *rest, **kwargs):
        scored.append(f"{task.name} {shots}-shot")
        if len(scored) == fail_at:
            raise RuntimeError("node lost")
        return real(lm, task, shots, *rest, **kwargs)

    monkeypatch.setattr(harness, "evaluate_task", counting)
    return scored


@pytest.mark.timeout(30)
def test_every_cell_is_checked_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import trident.evaluate.lm as lm_module

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the cells were checked")

    monkeypatch.setattr(lm_module, "load_trident", no_model)
    out, ckpt = tmp_path / "eval", tmp_path / "step_0000001"
    ckpt.mkdir()
    (ckpt / "COMPLETE").write_text("")  # a checkpoint that is there (a missing one is named before any cell)
    code = main(["eval", str(ckpt), "--tasks", "piqa,lambada,boolq", "--shots", "0,1,5", "--data-dir", str(FIXTURES),
                 "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "nothing was scored" in err
    assert "piqa 5-shot: needs 5 + 1 (the scored example is never its own example) few-shot examples but its " \
           "train split holds 3" in err
    assert "lambada 5-shot: needs 5 few-shot examples but its test split holds 4" in err
    assert "boolq 5-shot" in err and "1-shot" not in err  # every shortfall named, and only those
    assert not out.exists()


@pytest.mark.timeout(60)
def test_a_failed_run_leaves_partial_results_that_a_rerun_resumes(checkpoint, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    command = ["eval", str(checkpoint), "--tasks", "piqa,lambada", "--shots", "0,1", "--data-dir", str(FIXTURES),
               "--log-samples", "--json"]
    argv = [*command, "--out", str(out)]
    scored = _count_cells(monkeypatch, fail_at=3)
    with pytest.raises(RuntimeError, match="node lost"):
        main(argv)
    partial = json.loads((out / "results.json").read_text())
    assert partial["partial"] is True and {k: set(v) for k, v in partial["results"].items()} == {"piqa": {"0", "1"}}
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["piqa_0shot.jsonl", "piqa_1shot.jsonl"]

    scored = _count_cells(monkeypatch)
    assert main(argv) == 0  # no --overwrite needed
    assert scored == ["lambada 0-shot", "lambada 1-shot"]  # the finished cells were not scored again
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["partial"] is False and resumed["resumed"]["cells"] == ["piqa 0-shot", "piqa 1-shot"]
    capsys.readouterr()

    fresh = tmp_path / "fresh"
    assert main([*command, "--out", str(fresh)]) == 0
    expected = json.loads((fresh / "results.json").read_text())["results"]
    for task in ("piqa", "lambada"):
        for k in ("0", "1"):
            assert resumed["results"][task][k]["metrics"] == pytest.approx(expected[task][k]["metrics"])
    assert main(argv) == 2  # a finished evaluation is still never replaced silently
    assert "already holds results.json" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_partial_run_with_other_settings_is_not_resumed(checkpoint, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    argv = ["eval", str(checkpoint), "--tasks", "piqa", "--shots", "0,1", "--data-dir", str(FIXTURES),
            "--out", str(out), "--json"]
    _count_cells(monkeypatch, fail_at=2)
    with pytest.raises(RuntimeError):
        main(argv)
    scored = _count_cells(monkeypatch)
    assert main([*argv, "--seed", "9"]) == 2
    assert "other settings (seed 1234 there, 9 now" in capsys.readouterr().err and scored == []
    assert main([*argv, "--seed", "9", "--overwrite"]) == 0 and scored == ["piqa 0-shot", "piqa 1-shot"]
