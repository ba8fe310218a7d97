"""Pipeline parallelism on real ranks: every schedule, PP 2 and 4, interleaving, and PP x TP, against
one process: per-step losses and final weights within fp32 round-off, with the number of
micro-batches changing under the batch ramp-up; the tied embedding copies stay bit-identical."""
import pytest

from distributed import run_distributed
from train_fixtures import RAMP, VOCAB, assert_matches, RandomTokens, tiny_config, train_full


def _rank(rank, world, overrides, out_dir):
    return train_full(tiny_config(*RAMP, *overrides), f"{out_dir}/r{rank}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train_full(tiny_config(*RAMP), tmp_path_factory.mktemp("pp1"))


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
