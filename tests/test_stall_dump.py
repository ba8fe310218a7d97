"""The flight recorder's watchdog dumps a stalled rank before the collectives' timeout: the dump is
taken while the hang is still on (after the timeout NCCL aborts the stuck op)."""
from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.train.trainer import Trainer


def test_the_stall_dump_comes_before_the_group_timeout(tmp_path):
    config = tiny_config("parallel.timeout_s=30")
    trainer = Trainer(config, tmp_path, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    assert 0 < trainer.diagnostics.stall_s < config.parallel.timeout_s
