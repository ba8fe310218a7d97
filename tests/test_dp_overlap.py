"""The data-parallel gradient reduction overlaps the pipeline's drain (pp > 1): each bucket starts
reducing as soon as its gradients are final, i.e. during its chunk's last backward of the step, and
the results are bit-identical to reducing every bucket after the pipeline."""
import numpy as np
import pytest
import torch

from distributed import run_distributed
from train_fixtures import RandomTokens, VOCAB, tiny_config
from trident.parallel.buckets import ALIGN

STEPS = ["train.global_batch_size=16", "train.micro_batch_size=2", "train.rampup_batch_size=[8,8,256]",
         "train.steps=2", "model.num_layers=4", "parallel.bucket_size_mb=0.01", "logging.record_timeline=true"]


def _train(config, out_dir):
    from trident.train.trainer import Trainer

    trainer = Trainer(config, out_dir, datasets=(RandomTokens(config.model.seq_length), None),
                      vocab_size=VOCAB, log=lambda *a: None)
    losses = [trainer.train_step()["loss"] for _ in range(config.train.steps)]
    params = {name: param.detach().numpy().copy() for name, param in trainer.model.named_params}
    return losses, params, len(trainer.model.grad_buffers.buckets)


def _both_paths(rank, world, overrides, out_dir):
    config = tiny_config(*STEPS, "parallel.pp=2", "parallel.dp=2", *overrides)
    overlapped = _train(config, f"{out_dir}/overlap")  # parallel.overlap_grad_reduce defaults to true
    after = _train(tiny_config(*STEPS, "parallel.pp=2", "parallel.dp=2", *overrides,
                               "parallel.overlap_grad_reduce=false"), f"{out_dir}/after")
    return overlapped, after


def _stage_times(timeline, stage):
    """(first reduction launch, start and end of the last backward, or weight-gradient box in a
    zero-bubble schedule) on one stage."""
    reduces = [b.start for b in timeline.boxes if b.stage == stage and b.kind == "reduce"]
    last = max((b for b in timeline.boxes if b.stage == stage and b.kind in ("backward", "weight")),
               key=lambda b: b.end)
    return min(reduces), last.start, last.end


@pytest.mark.timeout(150)
@pytest.mark.parametrize("schedule,zero", [("1f1b", 0), ("1f1b", 1), ("interleaved", 1), ("zb-h1", 1),
                                           ("zb-h2", 1)])
def test_pp2_dp2_reduction_overlaps_the_drain_with_identical_results(schedule, zero, tmp_path):
    from trident.parallel.pipeline.timeline import Timeline

    overrides = [f"parallel.schedule={schedule}", f"parallel.zero_stage={zero}",
                 f"parallel.virtual_stages={2 if schedule == 'interleaved' else 1}"]
    results = run_distributed(_both_paths, 4, overrides, str(tmp_path), timeout=140)
    for (losses, params, buckets), (after_losses, after_params, _) in results:
        assert buckets > 2  # several buckets, so "the first one starts early" means something
        assert losses == after_losses  # exactly: the same collectives on the same data
        for name, value in params.items():
            np.testing.assert_array_equal(value, after_params[name], err_msg=name)
    last_step = "timeline_step2.json"
    overlapped, after = Timeline.load(tmp_path / "overlap" / last_step), Timeline.load(tmp_path / "after" / last_step)
    for stage in range(2):
        first_reduce, last_start, last_end = _stage_times(overlapped, stage)
        assert first_reduce < last_end, f"stage {stage}: no bucket started before the last backward ended"
        if schedule == "interleaved":  # chunk 1 is done before chunk 0's last backward begins
            assert first_reduce < last_start, f"stage {stage}: chunk 1's buckets waited for chunk 0"
        after_first, _, after_end = _stage_times(after, stage)
        assert after_first >= after_end  # without overlap: every bucket after the pipeline
        assert overlapped.bubble_fraction > 0  # the reductions do not count in the pipeline's bubble


def _launches(rank, world):
    """Which buckets have started reducing after each of two micro-batches' backward."""
    from trident.parallel.data import flat_buffers

    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    _, buffers = flat_buffers(list(layers.named_parameters()), torch.distributed.group.WORLD, world, rank, 64,
                              overlap=True, alone=[layers[0].weight])
    buffers.expect_accumulations(2)
    started = []
    for _ in range(2):
        layers(torch.ones(2, 4)).sum().backward()
        started.append([bucket.handle is not None for bucket in buffers.buckets])
    buffers.reduce()
    return started, [len(bucket.params) for bucket in buffers.buckets]


@pytest.mark.timeout(60)
def test_buckets_start_after_their_last_accumulation():
    for started, sizes in run_distributed(_launches, 2):
        assert sizes[-1] == 1  # the weight asked to be alone, in the last bucket
        assert started[0] == [False] * len(sizes)  # one of two micro-batches: nothing is final
        assert started[1] == [True] * len(sizes)  # every bucket, the one held alone too


def _late_gradient(rank, world):
    from trident.parallel.data import flat_buffers

    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 4)
    _, buffers = flat_buffers(list(layer.named_parameters()), torch.distributed.group.WORLD, world, rank, 2**20,
                              overlap=True)
    buffers.expect_accumulations(1)
    layer(torch.ones(2, 4)).sum().backward()  # final: the bucket starts reducing
    try:
        layer(torch.ones(2, 4)).sum().backward()
    except RuntimeError as err:
        buffers.reduce()
        return str(err)
    return "no error"


@pytest.mark.timeout(60)
def test_a_gradient_after_its_reduction_started_is_an_error():
    for message in run_distributed(_late_gradient, 2):
        assert "after its bucket's data-parallel reduction started" in message


def test_a_parameter_held_alone_gets_a_bucket_of_its_own():
    from trident.parallel.data import flat_buffers

    layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    named = list(layers.named_parameters())
    _, buffers = flat_buffers(named, None, 1, 0, 2**20, alone=[layers[0].weight])
    assert [len(b.params) for b in buffers.buckets] == [3, 1]  # reversed: 1.bias, 1.weight, 0.bias | 0.weight
    assert buffers.buckets[1].params[0] is layers[0].weight


def test_reduce_boxes_are_outside_the_pipeline_makespan_and_drawn(tmp_path):
    from trident.parallel.pipeline.draw import draw_timeline
    from trident.parallel.pipeline.timeline import Box, Timeline, TimelineRecorder

    pipeline = [Box(0, "forward", 0, 0, 0, 1), Box(1, "forward", 0, 0, 1, 2), Box(1, "backward", 0, 0, 2, 4),
                Box(0, "backward", 0, 0, 4, 6)]
    reduces = [Box(1, "reduce", 0, 0, 3.5, 6.5), Box(0, "reduce", 1, 0, 5.5, 7.0)]
    plain, with_reduces = Timeline(2, 1, boxes=pipeline), Timeline(2, 1, boxes=pipeline + reduces)
    assert with_reduces.makespan == plain.makespan == 6.0
    assert with_reduces.bubble_fraction == plain.bubble_fraction == 1.0
    assert draw_timeline(with_reduces, tmp_path / "t.png").stat().st_size > 0
    recorder = TimelineRecorder(0, clock=iter([10.0, 12.5]).__next__)
    recorder.start()
    assert recorder.now() == 2.5
    with pytest.raises(ValueError, match="unknown timeline box kind"):
        recorder.add("allreduce", 0, 0, 0.0, 1.0)


def _staged(rank, world):
    """ZeRO-2 buffers over three linear layers, one bucket each: the DP bytes launched after each of two
    micro-batches' backward (before reduce()), and the owned gradient slices after reduce()."""
    from trident.parallel.data import flat_buffers

    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    plain = [p.detach().clone().requires_grad_() for p in layers.parameters()]
    _, buffers = flat_buffers(list(layers.named_parameters()), torch.distributed.group.WORLD, world, rank, 64,
                              stage=2, overlap=True)
    launched = []
    for micro in range(2):
        x = torch.full((2, 4), float(rank + micro))
        layers(x).sum().backward()
        launched.append(buffers.sent_bytes)
        w0, b0, w1, b1, w2, b2 = plain  # the same sums without buffers: autograd, then an all-reduce
        torch.nn.functional.linear(torch.nn.functional.linear(torch.nn.functional.linear(x, w0, b0), w1, b1),
                                   w2, b2).sum().backward()
    buffers.reduce()
    for p in plain:
        torch.distributed.all_reduce(p.grad)
    owned = [buffers.owned_grad(p) for p in layers.parameters()]
    expected = [p.grad.reshape(-1)[slice(*buffers.layout.owned_slice(q))] for p, q in zip(plain, layers.parameters())]
    return launched, len(buffers.buckets), all(torch.allclose(a, b) for a, b in zip(owned, expected))


@pytest.mark.timeout(60)
def test_zero2_reduce_scatters_every_bucket_during_each_micro_batchs_backward():
    for launched, buckets, correct in run_distributed(_staged, 2):
        assert buckets == 3
        padded = 2 * ALIGN  # each bucket (4 x 4 + 4 elements) padded to 128 x dp (parallel/buckets.py)
        per_backward = padded * 4 * 3 // 2  # every bucket's fp32 gradient, (dp - 1)/dp of it sent
        assert launched == [per_backward, 2 * per_backward]  # launched inside the backward, not after
        assert correct  # the owned slices hold the sum over ranks and micro-batches


def _prefetches(rank, world):
    """ZeRO-3 over a 3-block GPT: at each block's forward, and just before its backward, which blocks'
    weights are gathered and which all-gathers are posted but not yet waited for."""
    from trident.model.gpt import build_model
    from trident.parallel.data import flat_buffers
    from trident.parallel.param_gather import ParamGather, unit_keys

    cfg = tiny_config("model.num_layers=3").model
    model = build_model(cfg, cfg.padded_vocab_size(1), 0)
    keys = unit_keys([model])
    params, buffers = flat_buffers(list(model.named_parameters()), torch.distributed.group.WORLD, world, rank,
                                   2**30, stage=3, overlap=True, unit_of=keys)
    ParamGather(params, buffers, [model])
    block_of = {b.index: keys[id(b.params[0])][1] for b in buffers.buckets}
    seen = []

    def state(moment, key):
        gathered = sorted({block_of[b.index] for b in buffers.buckets if b.full is not None})
        posted = sorted({block_of[b.index] for b in buffers.buckets if b.gathering is not None})
        seen.append((moment, key, gathered, posted))

    def before_backward(module, args, out, key) -> None:
        out.register_hook(lambda grad: state("backward", key))

    for key, block in model.blocks.items():  # registered after ParamGather's: they see what it did
        block.register_forward_pre_hook(lambda m, a, key=key: state("forward", key))
        block.register_forward_hook(lambda m, a, out, key=key: before_backward(m, a, out, key))
    tokens = torch.randint(0, 96, (2, 8))
    model(tokens, tokens).mean().backward()
    buffers.reduce()
    return seen, sorted(block_of[b.index] for b in buffers.buckets if b.full is not None)


@pytest.mark.timeout(60)
def test_zero3_posts_the_next_blocks_all_gather_before_this_block_computes():
    for seen, left in run_distributed(_prefetches, 2):
        assert seen == [("forward", "0", ["0", "root"], ["1"]), ("forward", "1", ["1", "root"], ["2"]),
                        ("forward", "2", ["2", "root"], []),
                        ("backward", "2", ["2", "root"], ["1"]), ("backward", "1", ["1", "root"], ["0"]),
                        ("backward", "0", ["0", "root"], [])]
        assert left == []  # nothing stays gathered after the step
