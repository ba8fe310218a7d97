"""Blending datasets by weight: greedy rule, convergence to the weights, blended samples, cache."""
import numpy as np
import pytest

from trident.config import DataConfig
from trident.data.blend import build_blending_indices, normalize_weights
from trident.data.build import build_datasets, parse_data_paths
from trident.data.indexed import IndexedDatasetBuilder


def greedy_choice(weights, counts, n):
    """The rule as stated: the dataset whose count lags its weight most; ties to the lowest index."""
    errors = [w * max(n, 1) - c for w, c in zip(weights, counts)]
    return errors.index(max(errors))


def test_every_choice_follows_the_greedy_rule():
    weights = normalize_weights([0.5, 0.3, 0.15, 0.05])
    which, local = build_blending_indices(weights, 2000)
    counts = [0] * 4
    for n, d in enumerate(which):
        assert d == greedy_choice(weights, counts, n), f"sample {n}"
        assert local[n] == counts[d]
        counts[d] += 1


@pytest.mark.parametrize("weights", [[0.143, 0.193, 0.057, 0.029, 0.048, 0.009], [1, 1], [3, 1, 0]])
def test_counts_track_the_weights_at_every_prefix(weights):
    w = normalize_weights(weights)
    n = 5000
    which, _ = build_blending_indices(w, n)
    counts = np.cumsum(np.eye(len(w), dtype=np.int64)[which], axis=0)  # counts after each sample
    expected = np.outer(np.arange(1, n + 1), w)
    assert np.abs(counts - expected).max() < 1.5  # never more than about one sample off
    assert np.allclose(counts[-1] / n, w, atol=1e-3)
    if 0 in weights:
        assert counts[-1][weights.index(0)] == 0


def test_weights_validated():
    with pytest.raises(ValueError, match="weights"):
        normalize_weights([0, 0])
    with pytest.raises(ValueError, match="weights"):
        normalize_weights([-1, 2])


def test_parse_data_paths_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plain = parse_data_paths(["a", "sub/b.bin"])
    assert [s.weight for s in plain] == [None, None]
    assert plain[0].prefix == tmp_path / "a" and plain[1].prefix == tmp_path / "sub" / "b"
    weighted = parse_data_paths([0.3, "a", "0.7", "b"])
    assert [s.weight for s in weighted] == [0.3, 0.7]
    with pytest.raises(ValueError, match="mixes"):
        parse_data_paths(["a", 0.5])


def write_source(prefix, base, num_docs=20):
    builder = IndexedDatasetBuilder(prefix, np.int32)
    for d in range(num_docs):
        builder.add_document(base + d * 100 + np.arange(1, 30))
    builder.finalize()


def test_blended_datasets_from_config(tmp_path):
    write_source(tmp_path / "a", base=0)
    write_source(tmp_path / "b", base=100_000)
    config = DataConfig(paths=[0.25, str(tmp_path / "a"), 0.75, str(tmp_path / "b")],
                        valid_fraction=0.1, cache_dir=str(tmp_path / "cache"))
    train, valid = build_datasets(config, 16, train_samples=400, valid_samples=40, seed=2)
    assert len(train) == 400 and len(valid) == 40
    from_b = 0
    for i in range(len(train)):
        sample = train[i]
        source = int(train.dataset_index[i])
        assert sample.shape == (17,)
        # every token of a sample comes from the dataset the blend index names
        assert ((sample >= 100_000) == bool(source)).all()
        from_b += source
    assert from_b == 300
    again, _ = build_datasets(config, 16, 400, 40, seed=2)
    assert again.from_cache and all(d.from_cache for d in again.datasets)
    assert np.array_equal(again[123], train[123])


def test_unweighted_sources_blend_by_tokens(tmp_path):
    write_source(tmp_path / "a", base=0, num_docs=10)
    write_source(tmp_path / "b", base=100_000, num_docs=30)
    config = DataConfig(paths=[str(tmp_path / "a"), str(tmp_path / "b")], valid_fraction=0.0,
                        cache_dir=str(tmp_path / "cache"))
    train, valid = build_datasets(config, 8, 400, 0, seed=0)
    assert len(valid) == 0
    assert np.bincount(train.dataset_index).tolist() == [100, 300]
