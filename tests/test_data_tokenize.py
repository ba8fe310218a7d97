"""`trident tokenize` / tokenize_files: JSONL variants, bad lines counted by FILE:LINE, strict mode,
worker pools, and the CLI end to end."""
import gzip
import json

import numpy as np
import pytest
import zstandard

from trident.cli import main
from trident.data.build import tokenize_files
from trident.data.indexed import IndexedDataset
from trident.data.tokenize_jsonl import TokenizeError
from trident.data.tokenizer import Tokenizer, train_tokenizer
from trident.text.jsonl import iter_jsonl

GOOD = [f"Document {i}: the quick brown fox — naïve café {i * 'ab'} 日本" for i in range(40)]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    (root / "train.txt").write_text("\n".join(GOOD * 5), encoding="utf-8")
    train_tokenizer([root / "train.txt"], 300, root / "tok")
    return root / "tok" / "tokenizer.json"


def lines_of(texts, key="text"):
    return [json.dumps({key: t, "id": i}).encode() + b"\n" for i, t in enumerate(texts)]


def test_good_documents_with_eod(tmp_path, tokenizer_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(lines_of(GOOD)))
    stats = tokenize_files([src], tmp_path / "out", tokenizer_path, progress=False)
    tok = Tokenizer.load(tokenizer_path)
    ds = IndexedDataset(tmp_path / "out")
    assert stats["documents"] == len(ds) == len(GOOD) and stats["bad_lines_total"] == 0
    assert ds.dtype == np.uint16
    for i, text in enumerate(GOOD):
        assert ds[i].tolist() == tok.encode(text) + [tok.eod_id]
        assert tok.decode(ds[i][:-1]) == text
    assert stats["tokens"] == ds.num_tokens
    assert json.loads((tmp_path / "out.stats.json").read_text())["documents"] == len(GOOD)
    assert stats["bad_lines_file"] is None and not (tmp_path / "out.bad_lines.jsonl").exists()


def test_compressed_inputs_and_json_key(tmp_path, tokenizer_path):
    payload = b"".join(lines_of(GOOD[:10], key="body"))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(payload))
    # two zstd frames back to back, as concatenated shards are
    z = zstandard.ZstdCompressor()
    (tmp_path / "b.jsonl.zst").write_bytes(z.compress(payload[:300]) + z.compress(payload[300:]))
    stats = tokenize_files([tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.zst"], tmp_path / "o",
                           tokenizer_path, json_key="body", progress=False)
    ds = IndexedDataset(tmp_path / "o")
    assert stats["documents"] == 20 and stats["bad_lines_total"] == 0
    assert np.array_equal(ds[3], ds[13])


def bad_file(path):
    lines = lines_of(GOOD[:5])
    lines.insert(1, b'{"text": "unterminated\n')  # line 2
    lines.insert(3, b'{"title": "no text field"}\n')  # line 4
    lines.insert(4, b'{"text": "caf\xe9 in latin-1"}\n')  # line 5
    lines.insert(5, b"\n")  # line 6
    lines.insert(6, b'{"text": ""}\n')  # line 7
    lines.insert(7, b'["a", "list"]\n')  # line 8
    lines.insert(8, b'{"text": 42}\n')  # line 9
    path.write_bytes(b"".join(lines))
    return path


def test_bad_lines_are_counted_with_file_and_line(tmp_path, tokenizer_path):
    src = bad_file(tmp_path / "bad.jsonl")
    stats = tokenize_files([src], tmp_path / "out", tokenizer_path, progress=False)
    assert stats["documents"] == 5
    assert stats["dropped"] == {"blank": 1, "empty_text": 1, "invalid_utf8": 1, "malformed_json": 1,
                                "missing_field": 3}
    assert stats["bad_lines_total"] == 5
    where = [line.split(": ")[0] for line in stats["bad_lines"]]
    assert where == [f"{src}:{n}" for n in (2, 4, 5, 8, 9)]
    assert "invalid_utf8" in stats["bad_lines"][2] and "'text'" in stats["bad_lines"][1]
    assert len(IndexedDataset(tmp_path / "out")) == 5
    saved = json.loads((tmp_path / "out.stats.json").read_text())
    assert saved["dropped"] == stats["dropped"]
    logged = [json.loads(line) for line in (tmp_path / "out.bad_lines.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"]) for r in logged] == [
        (2, "malformed_json"), (4, "missing_field"), (5, "invalid_utf8"), (8, "missing_field"), (9, "missing_field")]
    assert stats["bad_lines_file"] == str(tmp_path / "out.bad_lines.jsonl")


def test_strict_mode_raises_naming_file_and_line(tmp_path, tokenizer_path):
    src = bad_file(tmp_path / "bad.jsonl")
    with pytest.raises(TokenizeError, match=r"bad\.jsonl:2: malformed_json"):
        tokenize_files([src], tmp_path / "out", tokenizer_path, strict=True, progress=False)
    assert not (tmp_path / "out.bin").exists() and not (tmp_path / "out.bin.tmp").exists()


def test_reader_reports_each_line(tmp_path):
    src = bad_file(tmp_path / "bad.jsonl")
    results = list(iter_jsonl(src))
    assert [r.line for r in results] == list(range(1, 13))
    assert [r.reason for r in results][:6] == [None, "malformed_json", None, "missing_field", "invalid_utf8", "blank"]


def test_input_errors(tmp_path, tokenizer_path):
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        tokenize_files([tmp_path / "absent.jsonl"], tmp_path / "o", tokenizer_path, progress=False)
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(ValueError, match="x.csv"):
        tokenize_files([tmp_path / "x.csv"], tmp_path / "o", tokenizer_path, progress=False)


@pytest.mark.timeout(120)
def test_worker_pool_gives_identical_output(tmp_path, tokenizer_path, monkeypatch):
    import trident.data.tokenize_jsonl as tj

    monkeypatch.setattr(tj, "CHUNK_LINES", 7)  # many chunks, so ordering across workers matters
    src = bad_file(tmp_path / "in.jsonl")
    with open(src, "ab") as f:
        f.write(b"".join(lines_of(GOOD * 3)))
    one = tokenize_files([src], tmp_path / "one", tokenizer_path, workers=1, progress=False)
    two = tokenize_files([src], tmp_path / "two", tokenizer_path, workers=2, progress=False)
    assert (tmp_path / "one.bin").read_bytes() == (tmp_path / "two.bin").read_bytes()
    assert (tmp_path / "one.idx").read_bytes() == (tmp_path / "two.idx").read_bytes()
    assert one["dropped"] == two["dropped"] and one["bad_lines"] == two["bad_lines"]


@pytest.mark.timeout(120)
def test_cli_tokenizer_train_then_tokenize(tmp_path, capsys):
    src = tmp_path / "corpus.jsonl"
    src.write_bytes(b"".join(lines_of(GOOD)) + b"{oops\n")
    assert main(["tokenizer", "train", "--input", str(src), "--vocab-size", "290",
                 "--out", str(tmp_path / "tok"), "--gpt2-files", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["vocab_size"] == 290 and (tmp_path / "tok" / "merges.txt").is_file()
    assert main(["tokenize", "--input", str(src), "--output-prefix", str(tmp_path / "ds"),
                 "--tokenizer", str(tmp_path / "tok"), "--workers", "1", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["documents"] == len(GOOD) and stats["dropped"]["malformed_json"] == 1
    assert len(IndexedDataset(tmp_path / "ds")) == len(GOOD)
    # human-readable summary; strict mode fails with exit code 1 and names the line
    assert main(["tokenize", "--input", str(src), "--output-prefix", str(tmp_path / "ds2"),
                 "--tokenizer", str(tmp_path / "tok"), "--workers", "1"]) == 0
    assert "41 lines" in capsys.readouterr().out
    assert main(["tokenize", "--input", str(src), "--output-prefix", str(tmp_path / "ds3"),
                 "--tokenizer", str(tmp_path / "tok"), "--workers", "1", "--strict"]) == 1
    assert f"{src}:41" in capsys.readouterr().err
    assert main(["tokenizer", "train", "--input", str(tmp_path / "none.txt"), "--vocab-size", "300",
                 "--out", str(tmp_path / "t2")]) == 1


def test_stats_record_the_tokenizer_and_the_largest_id(tmp_path, tokenizer_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(lines_of(GOOD)))
    stats = tokenize_files([src], tmp_path / "out", tokenizer_path, progress=False)
    tok = Tokenizer.load(tokenizer_path)
    assert stats["tokenizer_sha256"] == tok.sha256() and len(stats["tokenizer_sha256"]) == 64
    assert stats["vocab_size"] == tok.vocab_size
    ds = IndexedDataset(tmp_path / "out")
    assert stats["max_token_id"] == max(int(ds[i].max()) for i in range(len(ds)))


def test_cli_refuses_to_replace_a_dataset_without_overwrite(tmp_path, tokenizer_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(lines_of(GOOD)))
    args = ["tokenize", "--input", str(src), "--output-prefix", str(tmp_path / "ds"), "--tokenizer",
            str(tokenizer_path), "--workers", "1"]
    assert main(args) == 0
    size = (tmp_path / "ds.bin").stat().st_size
    src.write_bytes(b"".join(lines_of(GOOD[:3])))
    assert main(args) == 2 and "ds.bin already exists" in capsys.readouterr().err
    assert (tmp_path / "ds.bin").stat().st_size == size
    assert main(args + ["--overwrite"]) == 0 and (tmp_path / "ds.bin").stat().st_size < size
