"""Every process group honours parallel.timeout_s: a hung TP or PP peer makes the surviving rank
stop within the timeout (the default group's is far longer) with a message naming the group, its
ranks and this rank; the checkpoint writer's wait for the other ranks uses the same timeout."""
import time

import pytest
import torch

from distributed import run_distributed
from train_fixtures import FAULT_TIMEOUT_S, VOCAB, faulty_rank, RandomTokens, tiny_config
from trident.checkpoint.writer import CheckpointWriter
from trident.parallel.mesh import Mesh
from trident.parallel.state import weight_piece


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout,group", [("parallel.tp=2", "tp group (ranks [0, 1])"),
                                          ("parallel.pp=2", "pp group (ranks [0, 1])")])
def test_hung_peer_is_reported_naming_its_group_within_the_timeout(layout, group):
    # The default group waits 120 s: only the groups' own timeout can stop rank 0 this early.
    (message, seconds), _ = run_distributed(faulty_rank, 2, "hangs", layout, pg_timeout=120, timeout=50, expect_dead=(1,))
    assert message.startswith("rank 0 (rank 0/2:"), message
    assert f"exchanging data with other ranks in the {group}: another rank probably died or hung" in message
    assert seconds < FAULT_TIMEOUT_S + 30, seconds


def test_checkpoint_writer_gives_up_on_a_silent_rank_after_its_timeout(tmp_path):
    writer = CheckpointWriter(tmp_path, Mesh(dp=3, rank=0), timeout_s=1.0)  # ranks 1 and 2 never write
    start = time.time()
    with pytest.raises(TimeoutError, match=r"ranks \[1, 2\] did not write their shards within 1.0s"):
        writer.save(1, [weight_piece("w", torch.zeros(2))], {"step": 1})
    assert 1.0 <= time.time() - start < 10
    assert not (tmp_path / "step_0000001").exists()


def test_trainer_gives_its_checkpoint_writer_the_configured_timeout(tmp_path):
    from trident.train.trainer import Trainer

    trainer = Trainer(tiny_config("parallel.timeout_s=7"), tmp_path, datasets=(RandomTokens(32), None),
                      vocab_size=VOCAB, log=lambda *a: None)
    assert trainer.writer.timeout_s == 7
