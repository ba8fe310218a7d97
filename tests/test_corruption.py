"""Silent corruption: a bit flipped in one DP replica's weights is found at the next digest check,
naming the rank and the parameter, and the job stops before a checkpoint could keep it."""
import os

import pytest

from distributed import run_distributed
from train_fixtures import VOCAB, RandomTokens, tiny_config
from trident.checkpoint.reader import complete_checkpoints


def _flipped(rank, world, out, overrides):
    from trident.train.diagnostics import CorruptionError
    from trident.train.trainer import Trainer

    os.environ["TRIDENT_INJECT"] = "rank=2,step=3,kind=bitflip"
    config = tiny_config("parallel.dp=4", "train.steps=8", f"checkpoint.dir={out}", *overrides)
    trainer = Trainer(config, out, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    try:
        trainer.train()
    except CorruptionError as error:
        return trainer.step, str(error)
    return trainer.step, "no error"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("overrides,found_at", [
    (["diagnostics.weight_check_interval=2", "checkpoint.save_interval=5"], 4),  # the next interval check
    (["diagnostics.weight_check_interval=100", "checkpoint.save_interval=1"], 3),  # before the save of step 3
])
def test_a_flipped_bit_is_named_and_no_checkpoint_keeps_it(tmp_path, overrides, found_at):
    results = run_distributed(_flipped, 4, str(tmp_path), overrides, timeout=60)
    for step, message in results:  # every rank stops at the same step with the same verdict
        assert step == found_at, message
        assert "parameter embedding.word.weight differs between data-parallel replicas, rank 2 at fault" in message
    saved = [int(p.name.split("_")[1]) for p in complete_checkpoints(tmp_path)]
    assert all(step < 3 for step in saved)  # the flip came after step 3's update: no checkpoint holds it
