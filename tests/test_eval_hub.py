"""Tasks loaded with `datasets` (no --data-dir) give the same documents as the published files.

Offline: local copies of the hub repositories (tests/hub_fixtures.py, the hub's names, configs,
splits and column types) are read through the same load_dataset call, pointed there by TRIDENT_HUB_DIR."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("datasets")

from eval_fixtures import FIXTURES, tiny_lm, tiny_tokenizer  # noqa: E402
from hub_fixtures import hub_root, offline_hub  # noqa: E402,F401 (fixtures)
from trident.evaluate.harness import run_evaluation  # noqa: E402
from trident.tasks import TASK_NAMES, TaskDataError, get_task  # noqa: E402
from trident.tasks.hub import HUB_DIR_ENV  # noqa: E402


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tiny_tokenizer(tmp_path_factory.mktemp("tok")), seq_length=256, batch_size=8)


def without_id(docs: list[dict]) -> list[dict]:
    """RACE's hub copy has no file names, which the local reader keeps as `id` (for logs only)."""
    return [{k: v for k, v in doc.items() if k != "id"} for doc in docs]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_hub_documents_equal_local_files(name, offline_hub):
    task = get_task(name)
    splits = [split for split in task.hub_splits if task.has_split(FIXTURES, split)]
    assert task.eval_split in splits
    for split in splits:
        local, hub = task.load(FIXTURES, split), task.load(None, split)
        assert without_id(hub) == without_id(local), (name, split)
        assert [task.requests(d, "") for d in hub] == [task.requests(d, "") for d in local]


def test_every_split_of_every_task_has_a_hub_source():
    for name in TASK_NAMES:
        task = get_task(name)
        assert task.hub is not None and task.eval_split in task.hub_splits, name


def test_scores_from_hub_equal_scores_from_files(offline_hub, lm):
    tasks = ["piqa", "winogrande", "hans", "anli_r1"]  # RACE's hub copy has no train split to draw shots from
    from_files = run_evaluation(lm, tasks, [0, 1], FIXTURES, None, seed=3, limit=3, progress=False)["results"]
    from_hub = run_evaluation(lm, tasks, [0, 1], None, None, seed=3, limit=3, progress=False)["results"]
    for task in tasks:
        for k in ("0", "1"):
            assert from_hub[task][k].pop("data").startswith("hub:")
            from_files[task][k].pop("data")
    assert json.dumps(from_hub, sort_keys=True) == json.dumps(from_files, sort_keys=True)  # NaN-safe


def test_race_shots_from_the_hub_come_from_its_test_split(offline_hub, lm):
    result = run_evaluation(lm, ["race"], [1], None, None, seed=3, progress=False)["results"]["race"]["1"]
    assert result["fewshot"]["source_split"] == "test" and result["n"] == 2


def test_missing_local_copy_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(HUB_DIR_ENV, str(tmp_path))
    with pytest.raises(TaskDataError, match=r"holds no folder baber/piqa/"):
        get_task("piqa").load(None, "validation")


def test_an_unreachable_hub_fails_at_once_naming_the_endpoint_and_data_dir(monkeypatch):
    import socket
    import time

    from trident.tasks.hub import hub_unreachable

    with socket.socket() as probe:  # a port nothing listens on: connections are refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", HUB_DIR_ENV, "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                 "all_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    start = time.perf_counter()
    with pytest.raises(TaskDataError, match=rf"hub cannot be reached \(127.0.0.1:{port}: .*\); use --data-dir"):
        get_task("lambada").load(None, "test")
    assert time.perf_counter() - start < 2  # not datasets' ~25 s of retries
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # datasets reads its own cache then: no connection tried
    assert hub_unreachable() is None
