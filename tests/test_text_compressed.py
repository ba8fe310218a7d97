"""A gzip member or zstd frame that fails its checksum yields none of its lines (never garbled
documents): they are dropped and counted; trident's own shards are written in checksummed frames."""
import gzip
import hashlib
import json

import pytest
import zstandard

from trident.curate.document import Document
from trident.curate.read import shards
from trident.curate.read.record_log import RecordLog
from trident.curate.read.shards import read_documents, write_shard
from trident.data.build import tokenize_files
from trident.data.indexed import IndexedDataset
from trident.data.tokenizer import Tokenizer, train_tokenizer
from trident.text.jsonl import UnreadableFile, iter_jsonl

TEXTS = [f"record {i}: pack my box with five dozen liquor jugs {i}" for i in range(60)]
# a member/frame far larger than one read, so the damage is met long after its first lines inflated
MANY = [f"{i} " + hashlib.sha256(str(i).encode()).hexdigest() * 2 for i in range(4000)]


def payload(texts) -> bytes:
    return b"".join(json.dumps({"text": t}).encode() + b"\n" for t in texts)


def flipped(data: bytes, at: int) -> bytes:
    damaged = bytearray(data)
    damaged[at] ^= 0x20  # one flipped bit in the compressed data
    return bytes(damaged)


def two_parts(suffix: str) -> bytes:
    """TEXTS[:30] in a good member/frame, then MANY in one with a flipped byte near its end."""
    if suffix == ".gz":
        first, second = gzip.compress(payload(TEXTS[:30])), gzip.compress(payload(MANY))
    else:
        compressor = zstandard.ZstdCompressor(write_checksum=True)
        first, second = compressor.compress(payload(TEXTS[:30])), compressor.compress(payload(MANY))
    assert len(second) > 2 * (1 << 16)
    return first + flipped(second, len(second) - 1000)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_a_member_or_frame_failing_its_checksum_yields_none_of_its_lines(tmp_path, suffix):
    src = tmp_path / f"in.jsonl{suffix}"
    src.write_bytes(two_parts(suffix))
    texts = []
    with pytest.raises(UnreadableFile) as caught:
        for result in iter_jsonl(src):
            texts.append(result.text)
    assert texts == TEXTS[:30]  # exactly the verified member/frame; nothing garbled
    assert caught.value.line == 31 and "lines) dropped" in caught.value.detail


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_tokenize_drops_and_counts_a_damaged_member(tmp_path, suffix):
    (tmp_path / "t.txt").write_text("\n".join(TEXTS * 3))
    tok = train_tokenizer([tmp_path / "t.txt"], 300, tmp_path / "tok")
    src = tmp_path / f"in.jsonl{suffix}"
    src.write_bytes(two_parts(suffix))
    stats = tokenize_files([src], tmp_path / "out", tok.source, progress=False)
    assert stats["documents"] == 30 and stats["dropped"]["unreadable_file"] == 1
    ds = IndexedDataset(tmp_path / "out")
    tokenizer = Tokenizer.load(tok.source)
    assert [tokenizer.decode(ds[i][:-1]) for i in range(len(ds))] == TEXTS[:30]


def test_curation_shards_are_written_in_checksummed_frames(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "FRAME_BYTES", 500)
    docs = [Document(id=str(i), text=t) for i, t in enumerate(TEXTS)]
    path = tmp_path / "s.jsonl.zst"
    write_shard(path, docs)
    data = path.read_bytes()
    assert zstandard.get_frame_parameters(data).has_checksum
    # damage the last frame: every earlier frame's documents survive, the damaged one is counted
    path.write_bytes(flipped(data, len(data) - 20))
    log = RecordLog()
    kept = list(read_documents(path, log))
    assert 30 < len(kept) < len(TEXTS) and [d.text for d in kept] == TEXTS[:len(kept)]
    assert log.counters["dropped:unreadable_file"] == 1

