"""MinHash signatures and LSH: estimates track true Jaccard, banding follows the S-curve."""
import random

import numpy as np
import pytest

from trident.curate.dedup.minhash import MinHasher, bucket_pairs, estimate_jaccard, jaccard
from trident.curate.dedup.shingles import shingle_hashes, shingles, xxh64_slices


def random_text(rng: random.Random, words: int) -> str:
    vocab = [f"w{rng.randrange(5000)}x" for _ in range(3000)]
    return " ".join(rng.choice(vocab) for _ in range(words))


def edit_words(rng: random.Random, text: str, n: int) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), n):
        words[i] = f"edit{rng.randrange(10**6)}"
    return " ".join(words)


def sets_with_jaccard(rng: np.random.Generator, size: int, similarity: float):
    """Two hash sets of equal size whose Jaccard is exactly `similarity` (up to rounding)."""
    shared = int(round(2 * size * similarity / (1 + similarity)))
    pool = rng.choice(np.iinfo(np.int64).max, size=2 * size, replace=False).astype(np.uint64)
    a = pool[:size]
    b = np.concatenate([pool[:shared], pool[size : 2 * size - shared]])
    return np.unique(a), np.unique(b)


def test_shingling_rules():
    assert shingles("Ab  C\n", 3) == {"ab ", "b c"}
    assert shingles("abc", 5) == {"abc"}
    assert shingles("   ", 5) == set()
    assert shingles("one two three four", 2, unit="word") == {"one two", "two three", "three four"}
    assert shingle_hashes("HELLO   world", 5).tolist() == shingle_hashes("hello world", 5).tolist()
    assert shingle_hashes("hello world").size == len(shingles("hello world"))
    with pytest.raises(ValueError, match="unit"):
        shingles("x", 5, unit="byte")
    with pytest.raises(ValueError, match="multiple of bands"):
        MinHasher(num_hashes=100, bands=7)


def test_vectorised_xxh64_equals_the_library():
    import xxhash

    data = bytes(np.random.default_rng(0).integers(0, 256, 120, dtype=np.uint8))
    for width in (1, 3, 4, 5, 8, 13, 31):
        for seed in (0, 12345):
            expected = [xxhash.xxh64_intdigest(data[i : i + width], seed) for i in range(len(data) - width + 1)]
            assert xxh64_slices(data, None, width, seed).tolist() == expected
            assert xxh64_slices(data, np.arange(len(expected)), width, seed).tolist() == expected
    starts = np.array([7, 0, 90, 7])
    assert xxh64_slices(data, starts, 9).tolist() == [xxhash.xxh64_intdigest(data[s : s + 9]) for s in starts]
    with pytest.raises(ValueError, match="outside"):
        xxh64_slices(data, np.array([115]), 9)
    # Shingle hashes are xxh64 of each shingle's UTF-8 bytes, whatever the characters' widths.
    for text in ("xxx abc", "plain ascii wörds — here 𝄞 ok", "日本語のテキストです"):
        assert shingle_hashes(text).tolist() == sorted(
            {xxhash.xxh64_intdigest(s.encode()) for s in shingles(text, 5)})
    ascii_text, other = shingle_hashes("plain ascii words here"), shingle_hashes("plain ascii wörds here")
    assert len(np.intersect1d(ascii_text, other)) == len(ascii_text) - 5  # the 5 covering o/ö


def test_estimate_tracks_true_jaccard():
    rng = np.random.default_rng(0)
    hasher = MinHasher()
    errors = []
    for similarity in (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95):
        for _ in range(5):
            a, b = sets_with_jaccard(rng, 800, similarity)
            sig = hasher.signatures_from_hashes([a, b])
            errors.append(estimate_jaccard(sig[0], sig[1]) - jaccard(a, b))
    errors = np.array(errors)
    # 100 hashes: standard error <= 0.05; a systematic bias would show in the mean.
    assert np.max(np.abs(errors)) < 0.16
    assert abs(errors.mean()) < 0.03


def test_signatures_are_seeded_and_batch_independent():
    rng = random.Random(1)
    texts = [random_text(rng, 50) for _ in range(5)] + [""]
    hasher = MinHasher(seed=7)
    batch = hasher.signatures(texts)
    one_by_one = np.concatenate([hasher.signatures([t]) for t in texts])
    assert np.array_equal(batch, one_by_one)
    assert np.array_equal(batch, MinHasher(seed=7).signatures(texts))
    assert not np.array_equal(batch[:5], MinHasher(seed=8).signatures(texts[:5]))
    assert batch.dtype == np.uint32 and batch.shape == (6, 100)


def test_lsh_recalls_near_duplicates_and_rejects_unrelated():
    rng = random.Random(2)
    hasher = MinHasher()
    bases = [random_text(rng, 300) for _ in range(20)]
    near = [edit_words(rng, b, 3) for b in bases]
    keys = hasher.band_keys(hasher.signatures(bases + near))
    base_keys, near_keys = keys[:20], keys[20:]
    recalled = [(base_keys[i] == near_keys[i]).any() for i in range(20)]
    assert all(recalled)
    unrelated = [(base_keys[i] == near_keys[j]).any() for i in range(20) for j in range(20) if i != j]
    assert not any(unrelated)


def test_candidate_rate_follows_s_curve():
    rng = np.random.default_rng(3)
    hasher = MinHasher(num_hashes=100, bands=20)  # 20 x 5: steep around J ~ 0.55
    trials = 150
    for similarity in (0.3, 0.5, 0.6, 0.8):
        hits = 0
        for _ in range(trials):
            a, b = sets_with_jaccard(rng, 300, similarity)
            keys = hasher.band_keys(hasher.signatures_from_hashes([a, b]))
            hits += bool((keys[0] == keys[1]).any())
        expected = float(candidate_probability(similarity, hasher.rows, hasher.bands))
        assert abs(hits / trials - expected) < 0.12, (similarity, hits / trials, expected)


def test_default_banding_threshold_matches_mtnlg_setting():
    hasher = MinHasher()
    assert (hasher.rows, hasher.bands) == (10, 10)
    assert hasher.threshold == pytest.approx(0.1**0.1)
    assert float(candidate_probability(0.9, 10, 10)) > 0.98
    assert float(candidate_probability(0.3, 10, 10)) < 1e-4


def test_bucket_pairs_small_and_large_buckets():
    band = np.array([0, 0, 0, 1, 1, 0], dtype=np.uint16)
    key = np.array([5, 5, 5, 5, 9, 6], dtype=np.uint64)
    doc = np.array([30, 10, 20, 10, 40, 50], dtype=np.uint64)
    pairs, buckets = bucket_pairs(band, key, doc)
    assert buckets == 1
    assert pairs.tolist() == [[10, 20], [10, 30], [20, 30]]
    many = np.arange(100, 140, dtype=np.uint64)
    pairs, _ = bucket_pairs(np.zeros(40, np.uint16), np.ones(40, np.uint64), many, all_pairs_up_to=8)
    # Star to the smallest member plus the chain of neighbours: 39 + 38 pairs, all connected.
    assert len(pairs) == 39 + 38
    assert {100} | set(pairs[:, 1].tolist()) == set(many.tolist())


def candidate_probability(similarity: float | np.ndarray, rows: int, bands: int):
    """Probability that LSH with ``bands`` x ``rows`` makes a pair of Jaccard ``similarity`` a candidate."""
    s = np.asarray(similarity, dtype=np.float64)
    return 1.0 - (1.0 - s**rows) ** bands
