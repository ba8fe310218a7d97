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


def test_model_flops_are_three_quarters_of_the_recomputed_count():
    """The paper's convention: no recomputation is 3/4 of F, the head included."""
    full = hand_count(2, 8, 3, 16, 64, forwards_per_layer=4)
    assert model_flops(2, 8, 3, 16, 64) == pytest.approx(0.75 * full, rel=1e-12)
    assert model_flops(2, 8, 3, 16, 64) == iteration_flops(2, 8, 3, 16, 64, recompute=False)
    # Counted without recomputation the layers take exactly 3/4; only the head differs.
    layers_only = hand_count(2, 8, 3, 16, 64, 3) - 3 * matmul(16, 16, 64)
    assert layers_only == 0.75 * (full - 3 * matmul(16, 16, 64))


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
