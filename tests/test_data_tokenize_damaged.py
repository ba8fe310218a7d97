"""Damaged input never aborts `trident tokenize` / tokenizer training: lone surrogates, truncated and
corrupt compressed files and over-long lines are skipped and counted with FILE:LINE, damaged files are
listed by name with what each lost; --strict stops."""
import gzip
import json
import tracemalloc

import pytest
import zstandard

from trident.cli import main
from trident.data.build import tokenize_files
from trident.data.indexed import IndexedDataset
from trident.data.tokenize_jsonl import TokenizeError
from trident.data.tokenizer import train_tokenizer
from trident.text.compressed import HOLD_LIMIT
from trident.text.damage import damage_summary
from trident.text.jsonl import iter_raw_lines

pytestmark = pytest.mark.timeout(120)
TEXTS = [f"document {i}: the quick brown fox jumps over the lazy dog {i}" for i in range(60)]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    (root / "train.txt").write_text("\n".join(TEXTS * 3), encoding="utf-8")
    train_tokenizer([root / "train.txt"], 300, root / "tok")
    return root / "tok" / "tokenizer.json"


def payload(texts) -> bytes:
    return b"".join(json.dumps({"text": t}).encode() + b"\n" for t in texts)


def truncated_zst(path):
    data = zstandard.ZstdCompressor().compress(payload(TEXTS))
    path.write_bytes(data[: len(data) * 2 // 3])


def truncated_gz(path):
    data = gzip.compress(payload(TEXTS))
    path.write_bytes(data[: len(data) * 2 // 3])


def corrupt_gz(path):
    # a flipped byte in the CRC trailer: every line inflates, then "CRC check failed"
    data = bytearray(gzip.compress(payload(TEXTS)))
    data[-6] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, name", [(truncated_zst, "a.jsonl.zst"), (truncated_gz, "a.jsonl.gz"),
                                          (corrupt_gz, "a.jsonl.gz")])
def test_a_damaged_file_is_counted_and_the_next_file_is_read(tmp_path, tokenizer_path, damage, name):
    damage(tmp_path / name)
    (tmp_path / "b.jsonl").write_bytes(payload(TEXTS[:5]))
    stats = tokenize_files([tmp_path / name, tmp_path / "b.jsonl"], tmp_path / "out", tokenizer_path,
                           progress=False)
    assert stats["dropped"]["unreadable_file"] == 1 and stats["bad_lines_total"] == 1
    assert stats["bad_lines"][0].startswith(f"{tmp_path / name}:")
    assert "unreadable_file" in stats["bad_lines"][0]
    # the lines before the damage are kept, then the whole next file
    assert stats["documents"] == len(IndexedDataset(tmp_path / "out")) >= 5
    logged = [json.loads(x) for x in (tmp_path / "out.bad_lines.jsonl").read_text().splitlines()]
    assert [x["reason"] for x in logged] == ["unreadable_file"]
    read = stats["documents"] - 5  # the lines before the damage
    assert stats["damaged_files"] == {str(tmp_path / name): {"unreadable_file": 1, "lines_before": read}}
    assert damage_summary(stats["damaged_files"]) == [f"{tmp_path / name}: 1 record lost (unreadable_file 1); "
                                                      f"unreadable after line {read}, the rest of the file is lost"]
    with pytest.raises(TokenizeError, match="unreadable_file"):
        tokenize_files([tmp_path / name], tmp_path / "strict", tokenizer_path, strict=True, progress=False)


def test_a_lone_surrogate_is_counted_not_a_crash(tmp_path, tokenizer_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(payload(TEXTS[:3]) + b'{"text": "bad \\ud800 here"}\n' + payload(TEXTS[3:6]))
    for workers in (1, 2):
        stats = tokenize_files([src], tmp_path / f"o{workers}", tokenizer_path, workers=workers, progress=False)
        assert stats["documents"] == 6 and stats["dropped"]["invalid_unicode"] == 1
        assert stats["bad_lines"] == [f"{src}:4: invalid_unicode: character 4: surrogates not allowed"]
    with pytest.raises(TokenizeError, match=f"{src}:4: invalid_unicode"):
        tokenize_files([src], tmp_path / "strict", tokenizer_path, strict=True, progress=False)


def test_a_line_over_max_doc_bytes_is_skipped_and_counted(tmp_path, tokenizer_path, capsys):
    src = tmp_path / "in.jsonl.gz"
    big = json.dumps({"text": "x" * 5000}).encode() + b"\n"
    src.write_bytes(gzip.compress(payload(TEXTS[:2]) + big + payload(TEXTS[2:4])))
    stats = tokenize_files([src], tmp_path / "out", tokenizer_path, max_doc_bytes=1000, progress=False)
    assert stats["documents"] == 4 and stats["dropped"]["too_large"] == 1
    assert stats["bad_lines"][0].startswith(f"{src}:3: too_large: 5012 bytes")
    assert main(["tokenize", "--input", str(src), "--output-prefix", str(tmp_path / "cli"), "--tokenizer",
                 str(tokenizer_path), "--max-doc-bytes", "1000", "--workers", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dropped"]["too_large"] == 1
    with pytest.raises(ValueError, match="max_doc_bytes must be positive"):
        tokenize_files([src], tmp_path / "zero", tokenizer_path, max_doc_bytes=0, progress=False)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_an_over_long_line_is_never_held_whole(tmp_path, suffix):
    # a 64 MB line in a small compressed file: read in bounded pieces, memory stays far below the line
    src = tmp_path / f"bomb.jsonl{suffix}"
    opener = gzip.open(src, "wb") if suffix == ".gz" else zstandard.open(src, "wb")
    with opener as fh:
        fh.write(b'{"text": "')
        for _ in range(64):
            fh.write(b"a" * (1 << 20))
        fh.write(b'"}\n{"text": "after"}\n')
    assert src.stat().st_size < 200_000
    tracemalloc.start()
    try:
        lines = [(n, d, s) for n, d, s in iter_raw_lines(src, max_line_bytes=1 << 16)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [(1, None, 64 * (1 << 20) + 12), (2, b'{"text": "after"}', 17)]
    # what a member/frame may hold while its checksum is pending, plus read buffers: not the line
    assert peak < 2 * HOLD_LIMIT + (4 << 20) < 64 << 20


def test_a_concatenated_gzip_is_read_once(tmp_path):
    # the first member inflates over several bounded calls and the second starts in the same read
    src = tmp_path / "two.jsonl.gz"
    big = json.dumps({"text": "a" * 5_000_000}).encode() + b"\n"
    src.write_bytes(gzip.compress(big) + gzip.compress(payload(TEXTS[:2])))
    assert [n for n, _, _ in iter_raw_lines(src)] == [1, 2, 3]


def test_tokenizer_training_counts_and_continues(tmp_path, capsys):
    truncated_zst(tmp_path / "a.jsonl.zst")
    corrupt_gz(tmp_path / "b.jsonl.gz")
    (tmp_path / "c.jsonl").write_bytes(payload(TEXTS) + b'{"text": "\\udc00"}\n'
                                       + json.dumps({"text": "y" * 3000}).encode() + b"\n")
    inputs = [str(tmp_path / n) for n in ("a.jsonl.zst", "b.jsonl.gz", "c.jsonl")]
    assert main(["tokenizer", "train", "--input", *inputs, "--vocab-size", "300", "--out", str(tmp_path / "tok"),
                 "--max-doc-bytes", "1000", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["skipped"] == {"invalid_unicode": 1, "too_large": 1, "unreadable_file": 2}
    assert info["vocab_size"] == 300
    # too_large is a rule, not damage: c.jsonl lost one line to damage
    assert {name.rsplit("/", 1)[-1]: sorted(lost) for name, lost in info["damaged_files"].items()} == {
        "a.jsonl.zst": ["lines_before", "unreadable_file"], "b.jsonl.gz": ["lines_before", "unreadable_file"],
        "c.jsonl": ["invalid_unicode"]}
    assert main(["tokenizer", "train", "--input", *inputs, "--vocab-size", "300", "--out", str(tmp_path / "tok2")]) == 0
    printed = capsys.readouterr().out
    assert f"damaged input: {tmp_path / 'c.jsonl'}: 1 record lost (invalid_unicode 1)" in printed


def test_tokenize_prints_the_damaged_files(tmp_path, tokenizer_path, capsys):
    truncated_gz(tmp_path / "a.jsonl.gz")
    (tmp_path / "b.jsonl").write_bytes(payload(TEXTS[:3]) + b"{not json\n")
    assert main(["tokenize", "--input", str(tmp_path / "a.jsonl.gz"), str(tmp_path / "b.jsonl"), "--output-prefix",
                 str(tmp_path / "out"), "--tokenizer", str(tokenizer_path), "--workers", "1"]) == 0
    damaged = [line for line in capsys.readouterr().out.splitlines() if line.startswith("damaged input: ")]
    assert damaged[0].startswith(f"damaged input: {tmp_path / 'a.jsonl.gz'}: 1 record lost (unreadable_file 1); "
                                 f"unreadable after line ")
    assert damaged[1:] == [f"damaged input: {tmp_path / 'b.jsonl'}: 1 record lost (malformed_json 1)"]
