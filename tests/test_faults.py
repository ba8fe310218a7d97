"""Faults: a dead or hung rank makes the others exit with a clear error; torchrun restarts resume
from the last complete checkpoint; damaged or mismatched checkpoints are refused naming the file."""
import json
import os
import subprocess
import sys
import time

import pytest

from distributed import run_distributed
from train_fixtures import FAULT_TIMEOUT_S, VOCAB, faulty_rank, RandomTokens, tiny_config, tiny_corpus
from trident.checkpoint.format import FORMAT_VERSION
from trident.checkpoint.integrity import CheckpointError
from trident.checkpoint.reader import CheckpointReader, complete_checkpoints


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault", ["dies", "hangs"])
def test_other_ranks_exit_with_a_clear_message(fault):
    (message, seconds), _ = run_distributed(faulty_rank, 2, fault, pg_timeout=FAULT_TIMEOUT_S, timeout=60,
                                            expect_dead=(1,))
    assert "another rank probably died or hung" in message and "checkpoint.load=auto" in message
    assert seconds < 30  # timeouts of 3 s: a hang is detected, not waited on forever


@pytest.mark.timeout(180)
def test_torchrun_restart_resumes_from_the_last_complete_checkpoint(tmp_path):
    tiny_corpus(tmp_path)
    # rank 1 SIGKILLs itself before step 4 on the first attempt only (TRIDENT_INJECT's default attempt=0)
    env = dict(os.environ, TRIDENT_INJECT="rank=1,step=4,kind=kill", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "trident", "train", "tiny", f"data.paths=[{tmp_path / 'data'}]",
               f"data.tokenizer={tmp_path / 'tok.json'}", "train.steps=6", "checkpoint.save_interval=2",
               "checkpoint.load=auto", "parallel.dp=2", "parallel.timeout_s=20", "--nproc", "2",
               "train.peak_tflops=1",  # each rank of both attempts would measure the CPU's matmul peak (~1-3 s)
               "--max-restarts", "1", "--out", str(tmp_path / "run")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed from" in done.stdout + done.stderr
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 6 and steps.count(3) == 2  # step 3 ran, the kill hit, resumed from step 2


@pytest.fixture
def saved(tmp_path):
    from trident.train.trainer import Trainer

    trainer = Trainer(tiny_config("train.steps=1", f"checkpoint.dir={tmp_path}"), tmp_path,
                      datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    trainer.train()
    return complete_checkpoints(tmp_path)[-1]


def test_truncated_shard_is_refused_naming_the_file(saved):
    shard = saved / "model-dp0-pp0-tp0.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="model-dp0-pp0-tp0.safetensors.*truncated"):
        CheckpointReader(saved)


def test_corrupted_shard_is_refused_naming_the_file(saved):
    shard = saved / "optim-dp0-pp0-tp0.safetensors"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="optim-dp0-pp0-tp0.safetensors.*corrupted"):
        CheckpointReader(saved)


def test_manifest_that_does_not_match_its_files_is_refused(saved):
    manifest = saved / "manifest-rank0.json"
    data = json.loads(manifest.read_text())
    data["tensors"][0]["shape"] = [7, 7]
    manifest.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="manifest-rank0.json says"):
        CheckpointReader(saved)
    manifest.write_text("{not json")
    with pytest.raises(CheckpointError, match="manifest-rank0.json: unreadable manifest"):
        CheckpointReader(saved)


def test_checkpoint_without_format_version_loads_as_version_1(saved):
    for path in [*saved.glob("manifest-rank*.json"), saved / "trainer_state.json"]:
        data = json.loads(path.read_text())
        assert data.pop("format_version") == FORMAT_VERSION
        path.write_text(json.dumps(data))  # read as version 1 (whole-file digests) as before the field existed
    assert CheckpointReader(saved).state["step"] == 1


@pytest.mark.parametrize("name", ["manifest-rank0.json", "trainer_state.json"])
def test_unknown_format_version_is_refused_naming_the_file(saved, name):
    path = saved / name
    path.write_text(json.dumps(json.loads(path.read_text()) | {"format_version": 99}))
    with pytest.raises(CheckpointError, match=f"{name}: checkpoint format version 99"):
        CheckpointReader(saved)


@pytest.mark.parametrize("override,message", [("model.num_layers=3", "no tensor 'blocks.2"),
                                               ("model.hidden_size=64", "model config differs")])
def test_checkpoint_of_another_model_is_refused(saved, override, message, tmp_path):
    from trident.train.trainer import Trainer

    with pytest.raises(CheckpointError, match=message):
        Trainer(tiny_config(override, f"checkpoint.load={saved}"), tmp_path / "other",
                datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)


def _bad_data_rank(rank, world, root):
    from trident.train.trainer import TrainError, Trainer

    config = tiny_config("parallel.dp=2", "model.vocab_size=0", f"data.paths=[{root / 'data'}]",
                         f"data.tokenizer={root / 'tok.json'}",
                         "parallel.timeout_s=600")
    start = time.time()
    try:
        Trainer(config, root / f"run{rank}", log=lambda *a: None)
    except TrainError as error:
        seconds = time.time() - start
        if rank == 0:
            time.sleep(6)  # rank 0 stays busy: the others must not be waiting for it to come back
        return str(error), seconds
    return "no error", time.time() - start


@pytest.mark.timeout(120)
def test_a_data_error_on_rank_zero_stops_every_rank_at_once(tmp_path):
    tiny_corpus(tmp_path)
    index = tmp_path / "data.idx"
    index.write_bytes(index.read_bytes()[:20])  # rank 0 builds the index caches and meets the damage
    results = run_distributed(_bad_data_rank, 2, tmp_path, pg_timeout=120, timeout=100)
    for message, seconds in results:
        assert "data.idx" in message and seconds < 5, (message, seconds)
