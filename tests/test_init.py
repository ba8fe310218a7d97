"""Shard-only initialisation: a TP shard drawn tile by tile equals the same slice of the full tensor,
a rank's build never holds more than its shard (measured), and the 530B first stage builds under
FakeTensorMode in its final dtype without drawing anything."""
import time

import pytest
import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake
from torch.distributed._tools.mem_tracker import MemTracker
from torch.testing._internal.distributed.fake_pg import FakeStore

from trident.config import ModelConfig, load_config
from trident.model.gpt import build_model
from trident.model.init import normal_tiles_
from trident.parallel.mesh import build_mesh
from trident.parallel.layout import rank_layout
from trident.parallel.parallelize import build_model_chunks
from trident.parallel.tensor import TPContext


@pytest.fixture
def fake_world():
    """start(world_size): rank 0 of a fake process group (no peers, collectives are no-ops)."""
    def start(world_size: int) -> None:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


# full shapes and TP degrees whose slice bounds fall inside tiles (tiles: 256 x 256, 65536 for 1-D)
@pytest.mark.parametrize("dim, full, parts", [(0, (600, 300), 3), (1, (300, 600), 4), (0, (150000,), 3)])
def test_tiles_of_a_shard_equal_that_slice_of_the_full_tensor(dim, full, parts):
    whole = normal_tiles_(torch.empty(full), [0] * len(full), full, 0.02, 5, "blocks.0.mlp.fc1.weight")
    assert whole.std().item() == pytest.approx(0.02, rel=0.02)
    size = full[dim] // parts
    for rank in range(parts):
        shape, offsets = list(full), [0] * len(full)
        shape[dim], offsets[dim] = size, rank * size
        for dtype in (torch.float32, torch.bfloat16):  # a bf16 shard is the fp32 values, cast
            shard = normal_tiles_(torch.empty(shape, dtype=dtype), offsets, full, 0.02, 5, "blocks.0.mlp.fc1.weight")
            assert torch.equal(shard, whole.narrow(dim, rank * size, size).to(dtype))
    other = normal_tiles_(torch.empty(full), [0] * len(full), full, 0.02, 5, "blocks.1.mlp.fc1.weight")
    assert not torch.equal(other, whole)


class CopiesInto(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the copies whose destination is `target`'s storage."""

    def __init__(self, target: torch.Tensor):
        super().__init__()
        self.storage, self.count = target.untyped_storage().data_ptr(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default and args[0].untyped_storage().data_ptr() == self.storage:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_staged_shard_is_sent_in_one_copy_with_the_same_values(dtype):
    """The accelerator path (assembled in a host buffer, one copy into the shard) gives the values of
    the tile-by-tile CPU path bit for bit; the CPU path copies each overlapping tile."""
    from trident.model.init import HostStaging

    full, offsets, shape = (700, 600), [0, 150], (700, 300)  # TP rank 1 of 2 along dim 1: 3 x 2 tiles
    direct = torch.empty(shape, dtype=dtype)
    with CopiesInto(direct) as copies:
        normal_tiles_(direct, offsets, full, 0.02, 5, "blocks.0.mlp.fc2.weight")
    assert copies.count == 6
    staging = HostStaging(pin=False)
    for _ in range(3):  # buffers reused turn by turn
        staged = torch.empty(shape, dtype=dtype)
        with CopiesInto(staged) as copies:
            normal_tiles_(staged, offsets, full, 0.02, 5, "blocks.0.mlp.fc2.weight", staging)
        assert copies.count == 1
        assert torch.equal(staged, direct)
    staging.finish()


def test_a_tp_rank_build_peaks_at_its_shard(fake_world):
    fake_world(4)
    tp = TPContext(dist.group.WORLD, 4, 0)
    cfg = ModelConfig(num_layers=2, hidden_size=1024, num_heads=8, seq_length=64, vocab_size=1024)
    with MemTracker() as tracker:  # live tensor storages, allocation by allocation
        model = build_model(cfg, cfg.padded_vocab_size(4), seed=0, tp=tp)
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    shard = sum(p.numel() * p.element_size() for p in model.parameters())
    assert model.blocks["0"].mlp.fc1.weight.shape == (1024, 1024)  # a quarter of 4096 x 1024
    assert shard <= peak <= 1.25 * shard, (peak, shard)


def test_530b_first_stage_builds_under_fake_tensors(fake_world):
    fake_world(2240)
    mesh = build_mesh(tp=8, pp=35, dp=8)
    config = load_config("mtnlg-530b", ["model.vocab_size=50257"])
    start = time.perf_counter()
    with FakeTensorMode():
        chunks = build_model_chunks(config.model, rank_layout(config, mesh), mesh.tp_context(), seed=config.train.seed,
                                    device=torch.device("cpu"), dtype=torch.bfloat16)
    seconds = time.perf_counter() - start
    params = [p for chunk in chunks for p in chunk.parameters()]
    assert all(is_fake(p) and p.dtype == torch.bfloat16 for p in params)
    m, tp = config.model, mesh.tp
    h, f, layers = m.hidden_size, m.ffn_size, m.num_layers // mesh.pp
    block = (3 * h * h + 3 * h + h * h + 2 * h * f + f) // tp + 2 * h + 4 * h  # + replicated biases, norms
    embedding = m.padded_vocab_size(tp) // tp * h + m.seq_length * h  # vocab slice + position table
    assert sum(p.numel() for p in params) == embedding + layers * block  # ~2.06B
    assert seconds < 30, seconds  # ~2 s: shapes only, nothing is drawn
