"""trident.flops' formula against FLOPs counted matmul by matmul (2 FLOPs per multiply-add)."""
import pytest

from trident.flops import iteration_flops, model_flops


def matmul(rows: int, inner: int, cols: int) -> int:
    return 2 * rows * inner * cols


def hand_count(batch: int, seq: int, layers: int, hidden: int, vocab: int, forwards_per_layer: int) -> int:
    """Every matmul of one iteration: forward, backward (two forwards) and, with recomputation, one
    more forward of each layer; the output head is never recomputed."""
    tokens = batch * seq
    layer = (matmul(tokens, hidden, 3 * hidden)  # QKV
             + matmul(tokens, hidden, hidden)  # attention output projection
             + matmul(tokens, hidden, 4 * hidden) + matmul(tokens, 4 * hidden, hidden)  # MLP
             + batch * (matmul(seq, hidden, seq) + matmul(seq, seq, hidden)))  # scores, weighted values
    head = matmul(tokens, hidden, vocab)
    return layers * forwards_per_layer * layer + 3 * head


@pytest.mark.parametrize("batch,seq,layers,hidden,vocab",
                         [(2, 8, 3, 16, 64), (1, 128, 2, 64, 512), (4, 2048, 105, 20480, 51200)])
def test_formula_with_recomputation_is_the_hand_count(batch, seq, layers, hidden, vocab):
    expected = hand_count(batch, seq, layers, hidden, vocab, forwards_per_layer=4)
    assert iteration_flops(batch, seq, layers, hidden, vocab, recompute=True) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("batch,seq,layers,hidden,vocab",
                         [(2, 8, 3, 16, 64), (1, 1024, 12, 768, 50304), (4, 2048, 105, 20480, 51200)])
def test_model_flops_count_the_head_once_forward_and_backward(batch, seq, layers, hidden, vocab):
    """MFU's count: the layers forward and backward (three forwards), the head forward and backward,
    never scaled by recomputation (which re-runs the layers only): not 3/4 of the recomputed count."""
    expected = hand_count(batch, seq, layers, hidden, vocab, forwards_per_layer=3)
    assert model_flops(batch, seq, layers, hidden, vocab) == pytest.approx(expected, rel=1e-12)
    assert model_flops(batch, seq, layers, hidden, vocab) == iteration_flops(batch, seq, layers, hidden, vocab,
                                                                             recompute=False)
    head = 3 * matmul(batch * seq, hidden, vocab)
    recomputed = iteration_flops(batch, seq, layers, hidden, vocab, recompute=True)
    assert recomputed - model_flops(batch, seq, layers, hidden, vocab) == pytest.approx(
        (expected - head) / 3, rel=1e-12)  # one more forward of the layers, the head's count unchanged
    assert model_flops(batch, seq, layers, hidden, vocab) > 0.75 * recomputed  # the old count shrank the head


def test_mfu_never_passes_100_percent_when_the_start_up_peak_was_measured_under_load(tmp_path):
    from train_fixtures import VOCAB, RandomTokens, tiny_config
    from trident.train.trainer import Trainer

    logs = []
    trainer = Trainer(tiny_config("train.peak_tflops=0"), tmp_path, datasets=(RandomTokens(32), None),
                      vocab_size=VOCAB, log=logs.append)
    trainer._peak_tflops = 1e-12  # as if the start-up measurement had run on a machine busy with other work
    first, second = trainer.train_step(), trainer.train_step()
    assert first["mfu"] == 1.0 and second["mfu"] <= 1.0
    assert sum("above the CPU matmul peak measured at start" in line for line in logs) >= 1
