"""Diagnosis from flight-recorder dumps: a rank hung before a pipeline send in pp2 x dp2 is named,
with the instruction it was stuck in and the ranks waiting for it; every rank's dump is written
within the timeout (the healthy ones when their exchange fails, the hung one by its watchdog)."""
import json
import os
import time
from pathlib import Path

import pytest

from distributed import run_distributed
from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.cli import main

TIMEOUT_S = 4


def _hung_before_send(rank, world, out):
    from trident.train.trainer import RankFailure, Trainer

    os.environ["TRIDENT_INJECT"] = "rank=0,step=3,kind=hang,at=send"
    config = tiny_config("parallel.pp=2", "parallel.dp=2", "train.steps=6", f"parallel.timeout_s={TIMEOUT_S}")
    trainer = Trainer(config, out, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    start = time.time()
    try:
        trainer.train()
    except RankFailure:
        failed = time.time() - start
        hung_dump = Path(out) / "debug" / "flight" / "rank_0.json"
        while not hung_dump.exists() and time.time() - start < failed + 3 * TIMEOUT_S:
            time.sleep(0.1)  # the hung rank's watchdog writes its own dump; keep it alive until then
        return failed
    return None


@pytest.mark.timeout(90)
def test_a_rank_hung_before_a_send_is_named_with_its_instruction(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")  # torch's flight recorder, as init_distributed turns it on
    seconds = run_distributed(_hung_before_send, 4, str(tmp_path), pg_timeout=TIMEOUT_S, timeout=60,
                              expect_dead=(0,))
    assert all(s is not None and s < 3 * TIMEOUT_S for s in seconds[1:]), seconds
    folder = tmp_path / "debug" / "flight"
    assert sorted(p.name for p in folder.glob("rank_*.json")) == [f"rank_{r}.json" for r in range(4)]
    assert main(["diagnose", str(tmp_path), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    first = verdict["first"]
    assert first["rank"] == 0 and first["event"]["op"] == "post send_activation"
    assert first["event"]["step"] == 3 and first["event"]["peer"] == 1
    waiting = {w["rank"]: w["event"]["op"] for w in verdict["waiting_on_first"]}
    assert waiting[1] == "wait recv_activation"  # its pipeline neighbour
    assert waiting[2].startswith("wait gradient bucket")  # its DP peer, in the gradient reduction
    behind = {g["group"]: g["behind"] for g in verdict["torch"]}  # torch's own recorder agrees
    assert behind["dp group (ranks [0, 2])"] == [0]
    assert main(["diagnose", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "first rank to stop: rank 0 (dp 0 pp 0 tp 0" in text
    assert "stuck in `post send_activation` micro-batch 0 chunk 0 to rank 1 (step 3)" in text


def test_a_rank_without_a_dump_that_others_wait_for_is_named(tmp_path, capsys):
    folder = tmp_path / "debug" / "flight"
    folder.mkdir(parents=True)
    now = time.time()
    waiting = {"seq": 9, "step": 5, "op": "wait recv_grad", "group": "pp group", "peer": 3, "microbatch": 1,
               "chunk": 0, "started": now - 5, "ended": None, "failed": False}
    (folder / "rank_2.json").write_text(json.dumps(
        {"rank": 2, "world_size": 4, "time": now, "last_progress": now - 5, "events": [waiting]}))
    assert main(["diagnose", str(tmp_path), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["first"]["rank"] == 3 and not verdict["first"]["dumped"] and verdict["missing"] == [0, 1, 3]
    assert main(["diagnose", str(tmp_path / "nothing")]) == 1
    assert "no flight-recorder dumps" in capsys.readouterr().err
