"""Object storage: every path a user gives may be an fsspec URL. Tested against a local S3 server
(moto) started on a free 127.0.0.1 port: checkpoints saved, resumed and resharded on s3 with each
rank's bytes read counted; data tokenized from s3 and trained on from s3; a WARC curated s3 to s3."""
import numpy as np
import pytest

from distributed import run_distributed
from train_fixtures import STOP, run_steps
from trident.checkpoint.reader import complete_checkpoints
from trident.text.storage import location

SMALL = ["model.num_layers=1"]  # few tensors: the local S3 server costs ~10 ms of this machine's CPU a request


def _resume_on_rank(rank, world, overrides, out_dir, load):
    """(losses after resuming, bytes of tensor files this rank read, its share of the checkpoint)."""
    from trident.checkpoint.state import owned_slices

    losses, trainer = run_steps(overrides, out_dir, load=load, ckpt=f"{out_dir}/ckpt", with_trainer=True)
    model = trainer.model
    weights = sum(p.numel() * p.element_size() for _, p in model.named_params)
    owned = sum(s.stop - s.start for *_, s, _ in owned_slices(model.named_params, model.buffers, model.optimizer))
    return losses, trainer.resume_bytes, weights + owned * 4 * (3 if model.optimizer.separate_master else 2)


@pytest.mark.timeout(240)
def test_checkpoints_save_resume_and_reshard_on_s3(s3, tmp_path):
    whole = run_steps(SMALL, tmp_path / "whole")
    root = s3.url("run-a/ckpt")
    first = run_steps([*SMALL, "checkpoint.async_save=true"], tmp_path / "a", stop=STOP, ckpt=root)
    saved = complete_checkpoints(root)
    assert [p.name for p in saved] == [f"step_{STOP:07d}"]
    assert (location(root) / "latest").read_text() == saved[0].name
    assert not s3.fs.glob(f"{root}/.tmp*")  # written in place, committed by COMPLETE
    resumed, trainer = run_steps(SMALL, tmp_path / "b", load="auto", ckpt=root, with_trainer=True)
    assert first + resumed == whole  # bit-exact through s3

    results = run_distributed(_resume_on_rank, 2, [*SMALL, "parallel.tp=2"], str(tmp_path / "c"), str(saved[0]),
                              timeout=150)
    np.testing.assert_allclose(first + results[0][0], whole, rtol=1e-5)  # resharded tp1 -> tp2
    for rank, (_, read, share) in enumerate(results):
        assert 0 < read <= 1.25 * share, (rank, read, share)  # range reads of its own tiles only
    assert trainer.resume_bytes > 0
