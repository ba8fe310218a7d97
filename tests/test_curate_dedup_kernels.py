"""Fuzzy dedup's compiled kernels against the definitions in trident.curate.dedup.minhash, and the stage's
kept documents against those the implementation before the kernels kept (recorded, see dedup_fixtures)."""
import json
import os

import numpy as np
import pytest
import xxhash

from dedup_fixtures import RECORDED, SETTINGS, corpus_shards, odd_texts
from trident.curate.dedup.fuzzy import FuzzyDedup
from trident.curate.dedup.kernels.loops import (band_keys, hashes_of_normalised, minhash_signatures, normalised_bytes,
                                                pair_jaccard, shingle_hashes_flat, shingle_signatures, xxh64_bytes)
from trident.curate.dedup.minhash import MinHasher, jaccard
from trident.curate.dedup.shingles import normalize_for_shingles, shingle_hashes, shingles
from trident.curate.document import Document
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor


def test_compiled_xxh64_equals_the_library():
    for length in range(0, 80):
        data = os.urandom(length)
        assert xxh64_bytes(data) == xxhash.xxh64_intdigest(data)


def test_normalisation_equals_the_python_rule():
    texts = odd_texts(1)
    buf, bounds = normalised_bytes(texts)
    for i, text in enumerate(texts):
        assert bytes(buf[bounds[i] : bounds[i + 1]]) == normalize_for_shingles(text).encode("utf-8", "surrogatepass")
    assert normalised_bytes([])[1].tolist() == [0]


def test_the_lower_case_table_is_str_lower_for_every_character_it_covers():
    """The compiled pass lower-cases non-ASCII text by a table of the Basic Multilingual Plane made
    from str.lower; only İ (two characters) and Σ (ς or σ by context) are left to str.lower itself."""
    from trident.curate.dedup.kernels.loops import _lower_table

    table = _lower_table()
    assert table.shape == (0x10000,) and np.flatnonzero(table < 0).tolist() == [0x130, 0x3A3]
    for code in range(0x10000):
        if table[code] >= 0:
            assert chr(code).lower() == chr(table[code]), hex(code)


@pytest.mark.parametrize("ngram,unit", [(1, "char"), (2, "char"), (5, "char"), (9, "char"), (40, "char"),
                                        (1, "word"), (3, "word")])
def test_shingle_hashes_equal_the_per_document_sets(ngram, unit):
    texts = odd_texts(2)
    flat, offsets = shingle_hashes_flat(texts, ngram, unit)
    assert len(offsets) == len(texts) + 1 and offsets[-1] == flat.size
    for i, text in enumerate(texts):
        assert set(flat[offsets[i] : offsets[i + 1]].tolist()) == set(shingle_hashes(text, ngram, unit).tolist())


@pytest.mark.parametrize("ngram,unit", [(1, "char"), (2, "char"), (5, "char"), (9, "char"), (1, "word"), (3, "word")])
def test_packed_shingle_keys_are_one_per_distinct_shingle(ngram, unit):
    """Verification's keys: the same shingle always gets the same key, distinct shingles distinct
    keys, so the Jaccard of two documents' keys is that of their shingle sets."""
    texts = odd_texts(5) + ["ab", "abcdefg", "abcdefgh", "é" * 3, "“quoted” —"]
    buf, bounds = normalised_bytes(texts)
    flat, offsets = hashes_of_normalised(buf, bounds, ngram, unit, packed=True)
    owner = {}
    for i, text in enumerate(texts):
        keys = flat[offsets[i] : offsets[i + 1]].tolist()
        strings = shingles(text, ngram, unit)
        in_order = _shingle_list(normalize_for_shingles(text), ngram, unit)
        assert len(keys) == len(in_order) and len(set(keys)) == len(strings)
        for key, shingle in zip(keys, in_order):
            assert owner.setdefault(key, shingle) == shingle  # one key, one shingle, across documents
    first, second = np.arange(len(texts)), np.arange(len(texts))[::-1].copy()
    expected = [_set_jaccard(shingles(texts[a], ngram, unit), shingles(texts[b], ngram, unit))
                for a, b in zip(first, second)]
    assert pair_jaccard(flat, offsets, first, second).tolist() == expected


def _shingle_list(norm: str, ngram: int, unit: str) -> list[str]:
    """The shingles of a normalised text in text order, with repeats (what the kernel emits)."""
    units = (norm.split(" ") if norm else []) if unit == "word" else list(norm)
    glue = " " if unit == "word" else ""
    if 0 < len(units) <= ngram:
        return [glue.join(units)]
    return [glue.join(units[i : i + ngram]) for i in range(len(units) - ngram + 1)]


def _set_jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def test_signatures_and_pair_jaccard_equal_the_numpy_definitions():
    texts = odd_texts(3) + [" ".join(f"w{i % 97}" for i in range(k, k + 300)) for k in range(0, 40, 3)]
    texts += [" ".join(f"w{i}" for i in range(9_000)), "x" + "y" * 16_387]  # several 16,384-hash passes
    hasher = MinHasher(bands=20)
    flat, offsets = shingle_hashes_flat(texts)
    assert np.array_equal(minhash_signatures(flat, offsets, hasher.multipliers),
                          hasher.signatures_from_flat(flat, offsets))
    sets = [shingle_hashes(t) for t in texts]  # sorted and distinct: what jaccard() takes
    rng = np.random.default_rng(0)
    first, second = rng.integers(0, len(texts), 500), rng.integers(0, len(texts), 500)
    first[:40] = second[:40]  # a document with itself, empty ones included
    expected = [jaccard(sets[a], sets[b]) for a, b in zip(first.tolist(), second.tolist())]
    assert pair_jaccard(flat, offsets, first, second).tolist() == expected  # hashes with repeats, text order
    distinct = np.concatenate(sets)
    doc_offsets = np.r_[0, np.cumsum([len(s) for s in sets])]
    assert pair_jaccard(distinct, doc_offsets, first, second).tolist() == expected


@pytest.mark.parametrize("ngram,unit", [(5, "char"), (1, "char"), (3, "word")])
def test_signatures_made_as_the_shingles_are_hashed_equal_those_of_the_hashes(ngram, unit):
    """shingle_signatures (hashes into the signature passes, no array of them) is minhash_signatures
    of hashes_of_normalised: texts empty, shorter than a shingle, and of several 16,384-hash blocks."""
    texts = odd_texts(3) + ["", "ab", "x" + "y" * 16_387, " ".join(f"w{i}" for i in range(20_000)), "a b"]
    buf, bounds = normalised_bytes(texts)
    hasher = MinHasher(bands=20)
    want = minhash_signatures(*hashes_of_normalised(buf, bounds, ngram, unit), hasher.multipliers)
    assert np.array_equal(shingle_signatures(buf, bounds, hasher.multipliers, ngram, unit), want)


def test_pair_jaccard_with_a_floor_is_exact_at_or_above_it_and_stops_early_below():
    """Pairs below the floor may stop early with a bound (at least their Jaccard, below the floor as
    the float32 the stage compares); every pair at or above it keeps its exact Jaccard."""
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(400)]
    base = [" ".join(rng.choice(words, 600)) for _ in range(6)]
    texts = base + [t[: len(t) * k // 10] for t in base for k in (3, 7, 9)]  # prefixes: J 0.3-0.9
    texts += [" ".join(t.split()[::-1][:500]) for t in base]  # shares many 5-grams: J ~0.1-0.3
    flat, offsets = shingle_hashes_flat(texts)
    first, second = (a.ravel() for a in np.meshgrid(np.arange(len(texts)), np.arange(len(texts))))
    exact = pair_jaccard(flat, offsets, first, second)
    for floor in (0.7, 0.85, 0.3):
        got = pair_jaccard(flat, offsets, first, second, floor)
        above = exact.astype(np.float32) >= floor
        assert above.any() and (~above).any()
        assert np.array_equal(got[above], exact[above])
        assert np.all(got[~above] >= exact[~above]) and np.all(got[~above].astype(np.float32) < floor)
        assert np.count_nonzero(got != exact) > len(got) // 4  # most pairs below the floor stopped early


@pytest.mark.parametrize("num_hashes,bands", [(100, 20), (100, 10), (100, 25), (128, 4), (96, 3), (100, 50), (8, 2)])
def test_compiled_band_keys_equal_the_xxh3_loop(num_hashes, bands):
    hasher = MinHasher(num_hashes=num_hashes, bands=bands)
    sig = np.random.default_rng(bands).integers(0, 2**32, (200, num_hashes), dtype=np.uint64).astype(np.uint32)
    assert np.array_equal(band_keys(hasher, sig), hasher.band_keys(sig))  # 8 and 4-byte bands: the loop itself


@pytest.mark.parametrize("case", sorted(json.loads(RECORDED.read_text())))
def test_stage_keeps_what_the_implementation_before_the_kernels_kept(tmp_path, case):
    recorded = json.loads(RECORDED.read_text())[case]
    seed, name = case.split("/")
    paths = []
    for k, part in enumerate(corpus_shards(int(seed.removeprefix("seed")))):
        paths.append(tmp_path / f"in{k}.jsonl.zst")
        write_shard(paths[-1], [Document(i, t, m) for i, t, m in part])
    stage = FuzzyDedup(**SETTINGS[name])
    outputs = stage.run(paths, tmp_path / "out", LocalExecutor(1, progress=False))
    assert sorted(d.id for p in outputs for d in read_shard(p)) == recorded["kept"]
    # screened_pairs is newer than the recording; the counts the screen could change (verified_pairs) are in it
    counters = {k: v for k, v in stage.counters.items() if not k.startswith("bytes") and k != "screened_pairs"}
    assert dict(sorted(counters.items())) == recorded["counters"]
