"""The blend (its loop plain or compiled) gives exactly the greedy loop's output: random, tied, tiny and long cases."""
import numpy as np
import pytest

from trident.data.blend import build_blending_indices, normalize_weights


def reference_blend(weights, num_samples):
    """The plain-Python loop trident used before the compiled one: the definition of the blend."""
    w = [float(x) for x in normalize_weights(weights)]
    counts = [0] * len(w)
    which = np.empty(num_samples, dtype=np.int16 if len(w) < 2**15 else np.int32)
    local = np.empty(num_samples, dtype=np.int64)
    for n in range(num_samples):
        scale = max(n, 1)
        best, best_error = 0, w[0] * scale - counts[0]
        for d in range(len(w)):
            error = w[d] * scale - counts[d]
            if error > best_error:
                best, best_error = d, error
        which[n] = best
        local[n] = counts[best]
        counts[best] += 1
    return which, local


def assert_same(weights, num_samples):
    which, local = build_blending_indices(weights, num_samples)
    ref_which, ref_local = reference_blend(weights, num_samples)
    assert which.dtype == ref_which.dtype and local.dtype == ref_local.dtype
    mismatch = np.flatnonzero(which != ref_which)
    assert len(mismatch) == 0, f"weights {list(weights)}: first difference at sample {mismatch[:1]}"
    assert np.array_equal(local, ref_local)


def random_weights(rng, case):
    num = int(rng.integers(1, 20))
    kind = case % 5
    if kind == 0:  # arbitrary
        return rng.random(num)
    if kind == 1:  # a few distinct values repeated: many exact ties
        return rng.choice([1.0, 2.0, 3.0], size=num)
    if kind == 2:  # tiny weights beside large ones
        return np.where(rng.random(num) < 0.5, rng.random(num) * 1e-6, rng.random(num) + 1e-9)
    if kind == 3:  # rounded decimals (as published blends), summing to 1 only within float error
        w = np.round(rng.dirichlet(np.ones(num)), 3) + 1e-3
        return w / w.sum()
    w = np.where(rng.random(num) < 0.5, 0.0, rng.random(num))  # zero weights among others
    w[rng.integers(num)] += 1.0
    return w


def test_many_random_cases_match_the_loop(loop_route):
    rng = np.random.default_rng(18)
    for case in range(150):
        assert_same(random_weights(rng, case), int(rng.integers(0, 400)))


@pytest.mark.parametrize("weights", [
    [1.0], [1, 1], [1] * 8, [1] * 9, [1] * 17, [1, 2, 3, 4, 5, 6, 7, 8, 9],
    [0.1] * 10,  # sums to 0.9999999999999999 in float64
    [1 / 3] * 3, [0.7, 0.2, 0.1], [1e-12, 1.0, 1e-12], [0, 0, 5, 0], [2.0**-40, 1.0],
])
def test_special_weights_match_the_loop(weights, loop_route):
    assert_same(weights, 3000)


def test_long_run_of_the_paper_blend_matches_the_loop():
    mtnlg = [0.143, 0.193, 0.057, 0.029, 0.048, 0.009, 0.010, 0.002,
             0.094, 0.014, 0.016, 0.130, 0.157, 0.090, 0.009]
    assert_same(mtnlg, 120_000)


def test_bad_sample_count_refused():
    with pytest.raises(ValueError, match="num_samples"):
        build_blending_indices([1, 2], -1)
