"""Layer partitioning across pipeline stages and interleaved model chunks."""
import pytest

from trident.parallel.pipeline.schedules import ScheduleError, partition_layers


def flatten_model_order(parts, pp, v):
    return [parts[c_s % pp][c_s // pp] for c_s in range(pp * v)]


@pytest.mark.parametrize("layers,pp,v", [(8, 4, 1), (10, 4, 1), (105, 35, 1), (24, 4, 2), (25, 4, 3), (7, 1, 3)])
def test_balanced_partition_covers_every_layer_in_model_order(layers, pp, v):
    parts = partition_layers(layers, pp, v)
    assert len(parts) == pp and all(len(chunks) == v for chunks in parts)
    blocks = flatten_model_order(parts, pp, v)
    assert [i for block in blocks for i in block] == list(range(layers))  # contiguous, model order
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # earlier blocks take the remainder


def test_interleaved_assignment_is_megatrons():
    # 16 layers, pp=2, v=4: stage 0 holds blocks 0, 2, 4, 6 of two layers each.
    parts = partition_layers(16, 2, 4)
    assert parts[0] == [range(0, 2), range(4, 6), range(8, 10), range(12, 14)]
    assert parts[1] == [range(2, 4), range(6, 8), range(10, 12), range(14, 16)]
    assert partition_layers(10, 4) == [[range(0, 3)], [range(3, 6)], [range(6, 8)], [range(8, 10)]]


def test_explicit_partition_is_respected():
    assert partition_layers(10, 3, partition=[2, 5, 3]) == [[range(0, 2)], [range(2, 7)], [range(7, 10)]]
    parts = partition_layers(12, 2, 2, partition=[1, 4, 4, 3])
    assert parts == [[range(0, 1), range(5, 9)], [range(1, 5), range(9, 12)]]
    # A zero entry is allowed (e.g. a last stage holding only the output head).
    assert partition_layers(4, 2, partition=[4, 0]) == [[range(0, 4)], [range(4, 4)]]


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_layers=3, pp=4), "num_layers=3 cannot fill pp x virtual_stages = 4 x 1"),
    (dict(num_layers=5, pp=2, virtual_stages=3), "num_layers=5 cannot fill pp x virtual_stages = 2 x 3 = 6"),
    (dict(num_layers=8, pp=0), "pp must be a positive integer"),
    (dict(num_layers=0, pp=1), "num_layers must be a positive integer"),
    (dict(num_layers=8, pp=2, virtual_stages=True), "virtual_stages must be a positive integer"),
    (dict(num_layers=8, pp=2, partition=[8]), "1 entries, expected pp x virtual_stages = 2 x 1 = 2"),
    (dict(num_layers=8, pp=2, partition=[4, 5]), r"sums to 9, but num_layers=8"),
    (dict(num_layers=8, pp=2, partition=[9, -1]), "entry 1 is -1"),
    (dict(num_layers=8, pp=2, partition=[4, 4.0]), "entry 1 is 4.0"),
])
def test_impossible_partitions_raise_naming_the_problem(kwargs, message):
    with pytest.raises(ScheduleError, match=message):
        partition_layers(**kwargs)
