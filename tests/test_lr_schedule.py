"""LR (warmup + cosine, in tokens) and MT-NLG's batch-size ramp-up."""
import pytest

from trident.config import TrainConfig
from trident.train.lr_schedule import TrainSchedule, batch_size, learning_rate


def test_warmup_then_cosine_to_min_lr():
    lr = lambda tokens: learning_rate(tokens, lr=1.0, min_lr=0.1, warmup_tokens=100, decay_tokens=1100)
    assert lr(0) == 0.0 and lr(50) == pytest.approx(0.5) and lr(100) == pytest.approx(1.0)
    assert lr(600) == pytest.approx(0.55)  # halfway through the cosine: (1 + 0.1) / 2
    assert lr(1100) == pytest.approx(0.1) and lr(10**9) == pytest.approx(0.1)
    values = [lr(t) for t in range(100, 1101, 50)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_mtnlg_rampup_32_plus_32_to_1920_over_12b_tokens():
    ramp = [32, 32, 12_000_000_000]
    assert batch_size(0, 1920, ramp, 2048) == 32
    per_increment = 12e9 / ((1920 - 32) / 32)
    assert batch_size(int(per_increment) - 1, 1920, ramp, 2048) == 32
    assert batch_size(int(per_increment) + 1, 1920, ramp, 2048) == 64
    assert batch_size(12_000_000_001, 1920, ramp, 2048) == 1920
    assert batch_size(5, 1920, None, 2048) == 1920


def test_schedule_over_a_run_is_reproducible_from_tokens():
    train = TrainConfig(steps=10, global_batch_size=16, micro_batch_size=2, rampup_batch_size=[4, 4, 400],
                        lr=1.0, min_lr=0.0, warmup_tokens=0)
    schedule = TrainSchedule(train, seq_length=10)
    sizes = schedule.batch_sizes()
    assert sizes[0] == 4 and sizes[-1] == 16 and sorted(sizes) == sizes
    assert schedule.total_tokens() == sum(sizes) * 10
    assert schedule.lr(schedule.total_tokens()) == 0.0  # decays over the whole run by default
