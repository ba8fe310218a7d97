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
