"""Pipeline parallelism on real ranks: every schedule, PP 2 and 4, interleaving, and PP x TP, against
one process: per-step losses and final weights within fp32 round-off, with the number of
micro-batches changing under the batch ramp-up; the tied embedding copies stay bit-identical."""
import numpy as np
import pytest
import torch.distributed as dist

from distributed import run_distributed
from test_tensor_parallel import RandomTokens, VOCAB, tiny_config

RAMP = ["train.global_batch_size=16", "train.micro_batch_size=2", "train.rampup_batch_size=[8,8,256]",
        "train.steps=5", "model.num_layers=4"]


def train_full(config, out_dir):
    """Train; return losses and the full parameters of the whole model, gathered to every rank."""
    from trident.train.trainer import Trainer

    trainer = Trainer(config, out_dir, datasets=(RandomTokens(config.model.seq_length), None),
                      vocab_size=VOCAB, log=lambda *a: None)
    records = [trainer.train_step() for _ in range(config.train.steps)]
    return [r["loss"] for r in records], [r["batch_size"] for r in records], all_parameters(trainer)


def all_parameters(trainer):
    """name -> full tensor, from every rank of the pipeline and tensor groups (object all-gather)."""
    mine = {}
    for name, param in trainer.model.named_params:
        mine.setdefault(name, []).append((getattr(param, "tp_dim", None), param.tp_rank,
                                          param.detach().float().numpy().copy()))
    gathered = [None] * (dist.get_world_size() if dist.is_initialized() else 1)
    if dist.is_initialized():
        dist.all_gather_object(gathered, (trainer.mesh.dp_rank, mine))
    else:
        gathered = [(0, mine)]
    pieces: dict = {}
    for dp_rank, shard in gathered:
        if dp_rank != 0:
            continue
        for name, entries in shard.items():
            pieces.setdefault(name, []).extend(entries)
    full = {}
    for name, entries in pieces.items():
        dim = entries[0][0]
        if dim is None:
            copies = [e[2] for e in entries]
            for copy in copies[1:]:  # replicated (and tied) copies must be bit-identical
                np.testing.assert_array_equal(copy, copies[0], err_msg=f"replicas of {name} diverged")
            full[name] = copies[0]
        else:
            by_rank = {e[1]: e[2] for e in entries}
            full[name] = np.concatenate([by_rank[r] for r in sorted(by_rank)], axis=dim)
    return full


def _rank(rank, world, overrides, out_dir):
    return train_full(tiny_config(*RAMP, *overrides), f"{out_dir}/r{rank}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train_full(tiny_config(*RAMP), tmp_path_factory.mktemp("pp1"))


def assert_matches(results, reference):
    ref_losses, ref_batches, ref_params = reference
    assert len(set(ref_batches)) > 1  # the ramp-up changed the number of micro-batches
    for losses, batches, params in results:
        assert batches == ref_batches
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
        assert params.keys() == ref_params.keys()
        for name, value in params.items():
            expected = ref_params[name]
            if name.endswith("qkv.bias"):  # key bias: zero true gradient, see test_tensor_parallel
                value, expected = value.reshape(4, 3, -1)[:, [0, 2]], expected.reshape(4, 3, -1)[:, [0, 2]]
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=2e-5, err_msg=name)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pp,schedule,virtual", [(2, "1f1b", 1), (2, "gpipe", 1), (4, "1f1b", 1),
                                                 (4, "gpipe", 1), (2, "interleaved", 2), (2, "zb-h1", 1),
                                                 (4, "zb-h1", 1), (2, "zb-h2", 1), (4, "zb-h2", 1)])
def test_pipeline_matches_single_process(pp, schedule, virtual, reference, tmp_path):
    overrides = [f"parallel.pp={pp}", f"parallel.schedule={schedule}", f"parallel.virtual_stages={virtual}"]
    assert_matches(run_distributed(_rank, pp, overrides, str(tmp_path)), reference)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_pipeline_times_tensor_parallel_matches_single_process(schedule, reference, tmp_path):
    overrides = ["parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true", f"parallel.schedule={schedule}"]
    assert_matches(run_distributed(_rank, 4, overrides, str(tmp_path)), reference)


def test_interleaving_needs_two_stages():
    from trident.config import ConfigError

    with pytest.raises(ConfigError, match="parallel.virtual_stages"):
        tiny_config("parallel.schedule=interleaved", "parallel.virtual_stages=2").validate(1)


def _timeline_rank(rank, world, out_dir):
    from trident.train.trainer import Trainer

    config = tiny_config(*RAMP, "parallel.pp=2", "logging.record_timeline=true")
    trainer = Trainer(config, out_dir, datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    record = trainer.train_step()
    return record["bubble"], record["bubble_theory"]


@pytest.mark.timeout(60)
def test_trainer_records_the_measured_pipeline_timeline(tmp_path):
    from trident.parallel.pipeline.timeline import Timeline

    results = run_distributed(_timeline_rank, 2, str(tmp_path))
    measured, theory = results[0]
    assert theory == pytest.approx(1 / 4)  # (pp - 1) / m with m = 8 / 2 micro-batches
    assert measured > 0
    timeline = Timeline.load(tmp_path / "timeline_step1.json")
    for stage in range(2):  # every micro-batch forwarded and backwarded once on each stage
        kinds = sorted((b.kind, b.microbatch) for b in timeline.compute_boxes if b.stage == stage)
        assert kinds == sorted([(k, m) for k in ("forward", "backward") for m in range(4)])
