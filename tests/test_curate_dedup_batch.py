"""The batched fuzzy-dedup paths give exactly what the per-document ones gave: shingle hashes,
signatures, candidate pairs, shard rows and the copied output."""
import random

import numpy as np
import pytest

from trident.curate.dedup.drop_rows import copy_without, filter_lines_task
from trident.curate.dedup.fuzzy import FuzzyDedup
from trident.curate.dedup.minhash import MinHasher, bucket_pairs, jaccard, sorted_distinct
from trident.curate.dedup.partitions import load_partition, save_partitioned
from trident.curate.dedup.shingle_batch import shingle_hash_batch
from trident.curate.dedup.shingles import shingle_hashes
from trident.curate.document import CurateError, Document
from trident.curate.droplog import log_path, read_log
from trident.curate.read.shard_lines import parse_document, shard_documents, shard_lines
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor
from trident.text.compressed import open_binary

SERIAL = LocalExecutor(1, progress=False)


def awkward_texts(seed: int = 0) -> list[str]:
    """Short, empty, all-space, mixed-case, every ASCII whitespace kind, and non-ASCII texts."""
    rng = random.Random(seed)
    alphabet = "ab cD\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f  xyZé’—\x85\xa0"
    fixed = ["", " ", "\x1f", "a", "ab", "abcd", "abcde", " abcde ", "  a  b  ", "abcdef", "Zé  xx", "ÀB"]
    return fixed + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(400)]


@pytest.mark.parametrize("ngram,unit", [(1, "char"), (2, "char"), (5, "char"), (9, "char"), (2, "word")])
def test_batched_shingle_hashes_equal_the_per_document_sets(ngram, unit):
    texts = awkward_texts()
    flat, offsets = shingle_hash_batch(texts, ngram, unit)
    assert len(offsets) == len(texts) + 1 and offsets[-1] == flat.size and flat.dtype == np.uint64
    for i, text in enumerate(texts):
        got = sorted_distinct(flat[offsets[i] : offsets[i + 1]])
        assert got.tolist() == shingle_hashes(text, ngram, unit).tolist(), repr(text)


def test_flat_signatures_equal_per_set_signatures_and_ignore_repeats():
    texts = awkward_texts(1)[:60] + [" ".join(f"w{i % 37}" for i in range(400))]
    hasher = MinHasher(seed=3)
    flat, offsets = shingle_hash_batch(texts, 5)
    distinct = [shingle_hashes(t) for t in texts]
    assert flat.size > sum(h.size for h in distinct)  # repeats were present
    assert np.array_equal(hasher.signatures_from_flat(flat, offsets), hasher.signatures_from_hashes(distinct))
    assert np.array_equal(hasher.signatures(texts), hasher.signatures_from_hashes(distinct))
    assert (hasher.signatures(["", "   "]) == np.iinfo(np.uint32).max).all()


def test_sorted_distinct_and_merge_jaccard():
    values = np.array([5, 1, 5, 2**64 - 1, 1, 0], dtype=np.uint64)
    assert sorted_distinct(values).tolist() == [0, 1, 5, 2**64 - 1]
    assert sorted_distinct(np.zeros(0, dtype=np.uint64)).size == 0
    a, b = np.array([1, 3, 5, 7], dtype=np.uint64), np.array([3, 4, 5], dtype=np.uint64)
    assert jaccard(a, b) == 2 / 5 and jaccard(a, a) == 1.0 and jaccard(a, b[:0]) == 0.0


@pytest.mark.parametrize("low_bits_only", [False, True])
def test_two_document_buckets_give_the_same_pairs_as_the_general_rule(low_bits_only):
    """Every bucket's pairs by the rule, written out; with keys that differ only above their low 40
    bits too (bucket_pairs first keeps the entries whose key repeats, through a table of low bits)."""
    rng = np.random.default_rng(0)
    band = rng.integers(0, 3, 400).astype(np.uint16)
    key = rng.integers(0, 60, 400).astype(np.uint64)
    if low_bits_only:  # 60 low-bit values, each shared by keys of 3 different high parts
        key |= rng.integers(0, 3, 400).astype(np.uint64) << np.uint64(40)
    doc = rng.integers(0, 90, 400).astype(np.uint64)
    pairs, buckets = bucket_pairs(band, key, doc, all_pairs_up_to=4)
    expected, groups = set(), 0
    for b, k in set(zip(band.tolist(), key.tolist())):
        members = np.unique(doc[(band == b) & (key == k)])
        m = len(members)
        if m < 2:
            continue
        groups += 1
        if m <= 4:
            expected |= {(int(members[i]), int(members[j])) for i in range(m) for j in range(i + 1, m)}
        else:
            expected |= {(int(members[0]), int(x)) for x in members[1:]}
            expected |= {(int(members[i]), int(members[i + 1])) for i in range(1, m - 1)}
    assert set(map(tuple, pairs.tolist())) == expected and buckets == groups
    # the same document twice in one bucket is no pair
    same = bucket_pairs(np.zeros(2, np.uint16), np.ones(2, np.uint64), np.array([7, 7], np.uint64))
    assert same[0].shape == (0, 2) and same[1] == 0


def write_raw(path, lines: list[bytes]) -> None:
    import zstandard

    path.write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n"))


@pytest.mark.parametrize("parts,step", [(1, 1), (16, 1), (10, 9_000)])
def test_partition_files_hold_each_partitions_rows_in_order(tmp_path, parts, step):
    """save_partitioned sorts once and slices: each partition's file holds exactly the records whose
    partition it is, in their order (structured records and 2-D pairs; partition numbers past 16 bits)."""
    rng = np.random.default_rng(parts)
    records = np.empty(5_000, dtype=[("band", "u2"), ("key", "u8"), ("doc", "u8")])
    records["band"], records["key"], records["doc"] = rng.integers(0, 20, 5_000), rng.integers(0, 2**63, 5_000), np.arange(5_000)
    pairs = rng.integers(0, 2**40, (5_000, 2)).astype(np.uint64)
    part_of = rng.integers(0, parts, 5_000) * step
    for name, rows in (("structured", records), ("pairs", pairs)):
        save_partitioned(rows, part_of, tmp_path / name, "p", "s000001")
        present = sorted(set(part_of.tolist()))
        assert sorted(f.name for f in (tmp_path / name).iterdir()) == [f"p{q:06d}" for q in present]
        for q in present:
            assert np.array_equal(load_partition(tmp_path / name / f"p{q:06d}"), rows[part_of == q])
    save_partitioned(records[:0], part_of[:0], tmp_path / "empty", "p", "s000001")
    assert not (tmp_path / "empty").exists()


def test_shard_rows_match_read_shard(tmp_path):
    path = tmp_path / "s.jsonl.zst"
    write_raw(path, [b'{"id": "a", "text": "x"}', b"", b"   ", "\u00a0".encode(), b'{"text": "no id", "k": 1}',
                     b'  {"id": "c", "text": "lead"}'])
    want = [(d.id, d.text, d.meta) for d in read_shard(path)]
    assert [(d.id, d.text, d.meta) for d in shard_documents(path)] == want
    assert [n for n, _ in shard_lines(path)] == [1, 5, 6]
    assert want[1][0] == "s.jsonl.zst:5"  # the id read_shard makes up: same line number
    for bad in (b'{"id": "x"}', b"{not json", b'{"text": "\\ud800"}', b'{"text": "\xff"}'):
        with pytest.raises(CurateError, match="line 3"):
            parse_document(path, 3, bad)


def test_line_copy_equals_the_document_copy(tmp_path):
    docs = [Document(f"d{i}", f"Text {i} é \u2028 " * (i % 5), {"dataset": "x", "q": [i, 0.5]}) for i in range(50)]
    src = tmp_path / "in.jsonl.zst"
    write_shard(src, docs)
    drop = [0, 7, 8, 49]
    sizes = tmp_path / "sizes.npy"
    np.save(sizes, np.array([d.nbytes for d in docs], dtype=np.int64))
    by_line = filter_lines_task({"src": str(src), "dst": str(tmp_path / "a.jsonl.zst"), "drop": drop,
                                 "reason": "duplicate", "stage": "fuzzy_dedup", "sizes": str(sizes)})
    by_doc = copy_without(str(src), str(tmp_path / "b.jsonl.zst"), set(drop), "duplicate", "fuzzy_dedup")
    assert by_line == by_doc
    assert open_binary(tmp_path / "a.jsonl.zst").read() == open_binary(tmp_path / "b.jsonl.zst").read()
    logged = [list(read_log(log_path(tmp_path / f"{name}.jsonl.zst"))) for name in "ab"]
    assert logged[0] == logged[1] == [{"id": docs[row].id, "url": "", "stage": "fuzzy_dedup", "reason": "duplicate"}
                                      for row in drop]
    np.save(sizes, np.ones(49, dtype=np.int64))  # the shard no longer has the rows it had
    with pytest.raises(CurateError, match="changed"):
        filter_lines_task({"src": str(src), "dst": str(tmp_path / "c.jsonl.zst"), "drop": [], "reason": "duplicate",
                           "stage": "fuzzy_dedup", "sizes": str(sizes)})


@pytest.mark.parametrize("name", ["in.jsonl", "in.jsonl.zst"])
@pytest.mark.parametrize("drop", [[], [0, 1, 5, 6, 7, 99, 119], list(range(120))])
def test_whole_shard_copy_is_the_line_by_line_copy_byte_for_byte(tmp_path, monkeypatch, name, drop):
    """filter_lines_task reads a shard trident wrote at once and copies runs of kept lines: the same
    compressed file (frames end where write_line ends them), drop log and counters as line by line."""
    import trident.curate.dedup.drop_rows as shared
    import trident.curate.read.shards as shards

    monkeypatch.setattr(shards, "FRAME_BYTES", 700)  # many frames from a small shard
    docs = [Document(f"d{i}", f"Text {i} é “q” " * (i % 9), {"url": f"u{i}"}) for i in range(120)]
    src = tmp_path / name
    write_shard(src, docs, None if name.endswith(".jsonl") else 1)
    sizes = tmp_path / "sizes.npy"
    np.save(sizes, np.array([d.nbytes for d in docs], dtype=np.int64))
    job = {"src": str(src), "drop": drop, "reason": "duplicate", "stage": "fuzzy_dedup", "sizes": str(sizes)}
    whole = shared.filter_lines_task({**job, "dst": str(tmp_path / "whole.jsonl.zst")})
    monkeypatch.setattr(shared, "_whole_lines", lambda path: None)
    by_line = shared.filter_lines_task({**job, "dst": str(tmp_path / "line.jsonl.zst")})
    assert whole == by_line and whole["out"] == 120 - len(drop)
    assert (tmp_path / "whole.jsonl.zst").read_bytes() == (tmp_path / "line.jsonl.zst").read_bytes()
    logs = [log_path(tmp_path / f"{copy}.jsonl.zst") for copy in ("whole", "line")]
    assert [log.exists() for log in logs] == [bool(drop)] * 2
    assert not drop or list(read_log(logs[0])) == list(read_log(logs[1])) != []


def test_a_shard_not_read_whole_goes_line_by_line(tmp_path):
    """A blank line (never in a shard trident wrote) sends the copy down the line-by-line path, which skips it."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"id": "a", "text": "x"}\n\n{"id": "b", "text": "y"}\n')
    sizes = tmp_path / "sizes.npy"
    np.save(sizes, np.ones(2, dtype=np.int64))
    counters = filter_lines_task({"src": str(src), "dst": str(tmp_path / "out.jsonl.zst"), "drop": [1],
                                  "reason": "duplicate", "stage": "fuzzy_dedup", "sizes": str(sizes)})
    assert counters["out"] == 1 and [d.id for d in read_shard(tmp_path / "out.jsonl.zst")] == ["a"]


def test_stage_output_is_the_kept_input_lines(tmp_path):
    rng = random.Random(2)
    base = [" ".join(f"w{rng.randrange(3000)}" for _ in range(200)) for _ in range(12)]
    docs = [Document(f"o{i}", t, {"dataset": "cc"}) for i, t in enumerate(base)]
    docs += [Document(f"c{i}", base[i].upper() + " end", {"dataset": "cc"}) for i in range(4)]
    paths = [tmp_path / "in0.jsonl.zst", tmp_path / "in1.jsonl.zst"]
    write_shard(paths[0], docs[::2])
    write_shard(paths[1], docs[1::2])
    stage = FuzzyDedup(bands=20)
    outputs = stage.run(paths, tmp_path / "out", SERIAL)
    kept = {d.id for p in outputs for d in read_shard(p)}
    assert stage.counters["dropped:duplicate"] == 4 and len(kept) == 12
    for src, out in zip(paths, outputs):
        expected = tmp_path / ("expected_" + src.name)
        write_shard(expected, [d for d in read_shard(src) if d.id in kept])
        assert open_binary(out).read() == open_binary(expected).read()
    assert stage.counters["bytes_in"] == sum(d.nbytes for d in docs)


def test_bucket_rows_read_from_a_file_or_an_object_are_the_saved_slices(tmp_path):
    """The bucket phase reads each partition's rows of a shard's one file, by byte range: locally and
    from an object store alike (memory://)."""
    from trident.curate.dedup.fuzzy import _load_rows
    from trident.text.storage import location, save_array

    records = np.zeros(1000, dtype=[("band", "u2"), ("key", "u8"), ("doc", "u8")])
    records["key"], records["doc"] = np.arange(1000) * 7, np.arange(1000)
    for where in (str(tmp_path / "s000000.npy"), f"memory://{tmp_path.name}/s000000.npy"):
        save_array(location(where), records)
        for start, stop in [(0, 0), (0, 1000), (17, 403), (999, 1000)]:
            assert np.array_equal(_load_rows(location(where), start, stop), records[start:stop])


def test_fuzzy_dedup_with_its_work_in_an_object_store_keeps_what_a_local_run_keeps(tmp_path):
    """The local executor's steps with OUT (and so every work file) under a URL: the same documents
    and counters as with a local OUT."""
    rng = random.Random(3)
    base = [" ".join(rng.choice("abcdefghij") * rng.randrange(2, 7) for _ in range(80)) for _ in range(6)]
    docs = [Document(f"d{i}", base[i % 6] + f" edit {i % 4}") for i in range(36)]
    inputs = [tmp_path / f"in{k}.jsonl.zst" for k in range(3)]
    for k, path in enumerate(inputs):
        write_shard(path, docs[k::3])
    runs = {}
    for name, out in (("local", tmp_path / "out"), ("store", f"memory://{tmp_path.name}/out")):
        stage = FuzzyDedup(bands=20, partitions=4)
        outputs = stage.run(inputs, out, SERIAL)
        runs[name] = (sorted(d.id for path in outputs for d in read_shard(path)), dict(stage.counters))
    assert runs["local"] == runs["store"] and runs["local"][1]["dropped:duplicate"] > 0
