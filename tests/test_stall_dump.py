"""The flight recorder's watchdog dumps a stalled rank before the collectives' timeout: the dump is
taken while the hang is still on (after the timeout NCCL aborts the stuck op)."""
import time

from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.parallel import flight
from trident.train.trainer import Trainer


def test_the_stall_dump_comes_before_the_group_timeout(tmp_path):
    config = tiny_config("parallel.timeout_s=30")
    trainer = Trainer(config, tmp_path, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    assert 0 < trainer.diagnostics.stall_s < config.parallel.timeout_s


def test_the_watchdog_stops_at_once_not_at_its_next_poll(monkeypatch):
    """Every train() stops it: waiting for its poll (0.5 s) cost each run, and each test that trains, up to that."""
    monkeypatch.setattr(flight, "WATCHDOG_POLL_S", 60.0)
    recorder = flight.FlightRecorder()
    recorder.start_watchdog(stall_s=600)
    time.sleep(0.2)  # the thread is inside its select
    started = time.time()
    recorder.stop_watchdog()
    assert time.time() - started < 1.5  # the old stop waited out its join's 2 s timeout here
