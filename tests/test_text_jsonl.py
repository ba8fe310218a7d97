"""The one JSONL reader: line numbers, bounded long lines, compressed and truncated files."""
import gzip
import json
import pickle
from collections import Counter

import pytest
import zstandard

from trident.curate.decontaminate import file_texts
from trident.curate.document import CurateError
from trident.tasks import TaskDataError
from trident.tasks.files import TEXT, read_jsonl
from trident.text.jsonl import UnreadableFile, iter_jsonl, iter_raw_lines, iter_texts, parse_line


def test_lines_longer_than_the_limit_are_sized_and_skipped_and_the_rest_read(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"a" * 10 + b"\r\n" + b"b" * 11 + b"\n" + b"c" * 5000 + b"\r\n" + b"d" * 3)
    lines = list(iter_raw_lines(path, max_line_bytes=10))
    assert [(n, size) for n, _, size in lines] == [(1, 10), (2, 11), (3, 5000), (4, 3)]
    assert [data for _, data, _ in lines] == [b"a" * 10, None, None, b"ddd"]
    assert [data for _, data, _ in iter_raw_lines(path)] == [b"a" * 10, b"b" * 11, b"c" * 5000, b"ddd"]
    results = list(iter_jsonl(path, max_line_bytes=10))
    assert [r.reason for r in results] == ["malformed_json", "too_large", "too_large", "malformed_json"]
    assert results[2].describe() == f"{path}:3: too_large: 5000 bytes, over the limit of 10"


def test_any_json_value_without_a_key_and_the_text_with_one():
    assert parse_line("f", 1, b"[1, 2]", key=None).value == [1, 2]
    good = parse_line("f", 2, b'{"text": "hi", "n": 1}')
    assert good.text == "hi" and good.value == {"text": "hi", "n": 1} and good.reason is None
    assert parse_line("f", 3, b"[1, 2]").reason == "missing_field"


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_a_cut_off_compressed_file_raises_naming_the_first_unread_line(tmp_path, suffix):
    data = b"".join(json.dumps({"text": f"doc {i} " + "word " * 40}).encode() + b"\n" for i in range(4000))
    z = zstandard.ZstdCompressor()
    # zstd: two frames back to back, as concatenated shards are
    packed = gzip.compress(data) if suffix.endswith(".gz") else z.compress(data[:5000]) + z.compress(data[5000:])
    whole, cut = tmp_path / f"whole{suffix}", tmp_path / f"cut{suffix}"
    whole.write_bytes(packed)
    cut.write_bytes(packed[: len(packed) // 2])
    assert sum(1 for _ in iter_jsonl(whole)) == 4000
    seen = []
    with pytest.raises(UnreadableFile) as err:
        seen.extend(r.text for r in iter_jsonl(cut))
    assert 0 < len(seen) < 4000 and all(seen)
    assert err.value.line == len(seen) + 1 and f"cut{suffix}:{len(seen) + 1}:" in str(err.value)
    assert pickle.loads(pickle.dumps(err.value)).line == err.value.line


def test_texts_skip_bad_lines_counting_them_and_plain_text_keeps_its_line_endings(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "a"}\n\n{"text": 1}\n{"text": "b"}\n{bad\n')
    counters = Counter()
    assert list(iter_texts(path, counters=counters)) == ["a", "b"]
    assert counters == {"skipped_lines:blank": 1, "skipped_lines:missing_field": 1, "skipped_lines:malformed_json": 1}
    path = tmp_path / "t.txt.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b"one\r\ntwo\n\nthree"))
    assert "".join(iter_texts(path)) == "one\r\ntwo\n\nthree"


def test_task_and_decontamination_readers_name_the_bad_line(tmp_path):
    path = tmp_path / "valid.jsonl"
    path.write_bytes(b'{"goal": "g"}\n\n{"goal": "caf\xe9"}\n')
    with pytest.raises(TaskDataError, match=r"piqa: .*valid.jsonl:3: not UTF-8"):
        read_jsonl(path, "piqa", "PIQA files", {"goal": TEXT})
    packed = tmp_path / "task.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"q": "a b c"}\n{"q": \n'))
    with pytest.raises(CurateError, match=r"task.jsonl.gz:2: malformed_json"):
        list(file_texts(packed))


def test_every_reader_keeps_the_same_per_line_limit(tmp_path, monkeypatch):
    """Eval task files, decontamination task files and contamination corpora read with curation's
    and tokenize's limit: a record past it is refused (eval data) or counted (a corpus), never expanded."""
    from trident.evaluate.contamination import training_texts
    from trident.text import jsonl

    limit = 1000
    for module in ("trident.tasks.files", "trident.curate.decontaminate", "trident.evaluate.contamination"):
        monkeypatch.setattr(f"{module}.DEFAULT_MAX_DOC_BYTES", limit)
    huge = json.dumps({"goal": "x" * (2 * limit), "text": "y " * limit}) + "\n"
    path = tmp_path / "task.jsonl"
    path.write_text(json.dumps({"goal": "fine", "text": "fine"}) + "\n" + huge)
    with pytest.raises(TaskDataError, match=r"task.jsonl:2: record too large"):
        read_jsonl(path, "piqa", "the published piqa files", {"goal": TEXT})
    with pytest.raises(CurateError, match=r"task.jsonl:2.*too_large"):
        list(file_texts(path, ["text"]))
    counters = Counter()
    assert list(training_texts([path], counters)) == ["fine"]
    assert counters["skipped_lines:too_large"] == 1
    assert jsonl.DEFAULT_MAX_DOC_BYTES > limit  # the shared default itself is untouched
