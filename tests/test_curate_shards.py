"""Readers and writers of curation shards: every bad record is reported with file and position,
counted, and never stops the run (unless strict)."""
import gzip
import io
import json

import pytest
import zstandard
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from trident.curate.document import CurateError, Document
from trident.curate.read.doc_ids import DocumentIds
from trident.curate.read.record_log import RecordLog
from trident.curate.read.shards import read_documents, read_shard, record_lines, write_shard


def _read(path, strict=False, **kwargs):
    log = RecordLog(strict=strict)
    docs = list(read_documents(path, log, **kwargs))
    return docs, log


def _lines(*objs):
    return b"".join((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n" for o in objs)


def test_document_json_roundtrip_and_shard_roundtrip(tmp_path):
    docs = [Document(f"d{i}", f"Text number {i} with ünïcödé and \"quotes\"\nnew line",
                     {"url": f"https://x.org/{i}", "dataset": "cc", "quality_score": 0.5}) for i in range(50)]
    assert Document.from_json(docs[3].to_json(), "unused") == docs[3]
    path = tmp_path / "s.jsonl.zst"
    assert write_shard(path, docs) == 50
    assert list(read_shard(path)) == docs
    assert not list(tmp_path.glob("*.tmp"))  # written atomically
    with pytest.raises(CurateError, match="reserved"):
        Document("x", "t", {"text": "clash"}).to_json()


def test_jsonl_bad_lines_are_reported_with_line_numbers_and_counted(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(_lines(
        {"text": "good one", "url": "u1"},
        b'{"text": "unterminated',
        b'\xff\xfe not utf-8 \x80',
        {"url": "no text field"},
        b'{"text": "lone surrogate \\ud800 here"}',
        b"",
        {"id": "keep-me", "text": "good two"},
        b"[1, 2, 3]",
    ))
    docs, log = _read(path, dataset="web")
    assert [d.text for d in docs] == ["good one", "good two"]
    assert docs[0].id == "mixed.jsonl:1" and docs[1].id == "keep-me"
    assert docs[0].meta == {"url": "u1", "source": "mixed.jsonl", "dataset": "web"}
    assert log.counters["in"] == 7 and log.counters["out"] == 2  # the blank line is no record
    assert log.counters["dropped:malformed_json"] == 1
    assert log.counters["dropped:invalid_utf8"] == 1
    assert log.counters["dropped:malformed_record"] == 2
    assert log.counters["dropped:invalid_unicode"] == 1
    positions = {(e["reason"], e["position"]) for e in log.errors}
    assert ("malformed_json", "line 2") in positions and ("invalid_utf8", "line 3") in positions
    assert all(e["file"] == str(path) for e in log.errors)
    with pytest.raises(CurateError, match=r"mixed.jsonl: record at line 2: malformed_json"):
        _read(path, strict=True)


@pytest.mark.parametrize("strict", [False, True])
def test_record_lines_are_the_documents_lines_with_the_same_reports(tmp_path, strict):
    path = tmp_path / "mixed.jsonl.zst"
    good = [{"text": "plain"}, {"id": 7, "text": "number id", "url": "u"}, {"id": None, "text": "null id"},
            {"text": "ünï “quoted” — 😀", "source": "own", "dataset": "mine", "quality_score": 0.5},
            {"meta": {"nested": [1, 2]}, "text": "text after meta", "id": "x"}, {"text": ""},
            b'  {"text": "json spaces around"} \t', b'{"text": "nan", "score": NaN, "big": 1e400}']
    bad = [b'{"text": "unterminated', b"\xff not utf-8", {"url": "no text"}, b'{"text": "lone \\ud800"}', b"", b"   ",
           b"[1]", {"text": "x" * 300}, b'{"text": "junk after"} x', b'{"text": "vertical tab after"}\x0b',
           '\ufeff{"text": "byte order mark"}'.encode()]
    records = [r for pair in zip(good, bad) for r in pair] + good[len(bad):] + bad[len(good):]
    path.write_bytes(zstandard.ZstdCompressor().compress(_lines(*records)))
    docs_log, lines_log = RecordLog(strict=strict), RecordLog(strict=strict)
    try:
        want = [json.dumps(d.to_json(), ensure_ascii=False).encode() for d in
                read_documents(path, docs_log, dataset="web", max_doc_bytes=200)]
    except CurateError as err:
        with pytest.raises(CurateError, match=str(err).split(":")[1]):
            list(record_lines(path, lines_log, "web", max_doc_bytes=200))
        return
    assert list(record_lines(path, lines_log, "web", max_doc_bytes=200)) == want
    assert len(want) == len(good) and lines_log.counters == docs_log.counters and lines_log.errors == docs_log.errors


def test_record_lines_escape_every_character_as_json_does(tmp_path):
    """The quick path escapes a record's text on its bytes: its lines are json.dumps's, byte for byte,
    for every character that json escapes or a byte-level escape could confuse."""
    import random

    rng = random.Random(0)
    alphabet = [chr(c) for c in range(0x80)] + ["\x7f", "\x80", "\u2028", "é", "“", "\ufeff", "😀", "\\", '"', "\n"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(3000)]
    ids = ['a"b', ', "text": ""', "x\\y", "é"]
    path = tmp_path / "chars.jsonl"
    path.write_bytes(_lines(*({"id": ids[k % 4], "text": t, "url": ', "text": ""'} for k, t in enumerate(texts))))
    got = list(record_lines(path, RecordLog(strict=True), "web", name="chars.jsonl", ids=DocumentIds()))
    want = [json.dumps(d.to_json(), ensure_ascii=False).encode() for d in
            read_documents(path, RecordLog(strict=True), "web", name="chars.jsonl", ids=DocumentIds())]
    assert got == want and [json.loads(line)["text"] for line in got] == texts


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_truncated_compressed_jsonl_keeps_what_was_readable(tmp_path, suffix):
    data = _lines(*({"text": f"document {i} " + "word " * 50} for i in range(3000)))
    packed = gzip.compress(data) if suffix.endswith(".gz") else zstandard.ZstdCompressor().compress(data)
    whole, cut = tmp_path / f"whole{suffix}", tmp_path / f"cut{suffix}"
    whole.write_bytes(packed)
    cut.write_bytes(packed[: len(packed) // 2])
    assert len(_read(whole)[0]) == 3000
    docs, log = _read(cut)
    assert 0 < len(docs) < 3000
    assert log.counters["dropped:unreadable_file"] == 1
    assert log.counters["in"] == log.counters["out"] + 1
    assert log.errors[0]["position"] == f"line {len(docs) + 1}"


def test_binary_junk_and_oversized_records(tmp_path):
    junk = tmp_path / "junk.jsonl.gz"
    junk.write_bytes(bytes(range(256)) * 10)
    docs, log = _read(junk)
    assert docs == [] and log.counters["dropped:unreadable_file"] == 1
    junk_warc = tmp_path / "junk.warc"
    junk_warc.write_bytes(b"WARC/1.0 not really\r\n" + bytes(range(256)) * 10)
    docs, log = _read(junk_warc)
    assert docs == [] and log.counters["dropped:malformed_warc_record"] == 1 and log.errors[0]["position"] == "byte 0"
    big = tmp_path / "big.jsonl"
    big.write_bytes(_lines({"text": "x" * 2000}, {"text": ""}, {"text": "small"}))
    docs, log = _read(big, max_doc_bytes=1000)
    assert [d.text for d in docs] == ["", "small"]  # empty documents are read; filters drop them
    assert log.counters["dropped:too_large"] == 1


def _warc(path, records, gz=True):
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=gz)
        for url, status, ctype, body in records:
            headers = StatusAndHeaders(f"{status} X", [("Content-Type", ctype)], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body),
                                                          http_headers=headers))
            writer.write_record(writer.create_warc_record(url, "request", payload=io.BytesIO(b""),
                                                          http_headers=StatusAndHeaders("GET / HTTP/1.1", [],
                                                                                        is_http_request=True)))


def test_warc_records_become_documents_with_http_metadata(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    _warc(path, [
        ("https://a.org/", 200, "text/html; charset=utf-8", "<html><body><p>Grüße</p></body></html>".encode()),
        ("https://b.org/", 404, "text/html", b"<html>gone</html>"),
        ("https://c.org/x.pdf", 200, "application/pdf", b"%PDF-1.4 binary"),
        ("https://d.org/", 200, "text/html; charset=iso-8859-1", "<p>caf\xe9</p>".encode("latin-1")),
        ("https://e.org/", 200, "text/html", b"<p>bad \xff\xfe bytes</p>"),
    ])
    docs, log = _read(path, dataset="cc")
    assert [d.meta["url"] for d in docs] == ["https://a.org/", "https://b.org/", "https://c.org/x.pdf",
                                             "https://d.org/", "https://e.org/"]
    assert "Grüße" in docs[0].text and docs[0].meta["http_status"] == 200
    assert docs[1].meta["http_status"] == 404 and docs[2].meta["content_type"] == "application/pdf"
    assert "café" in docs[3].text
    assert "\ufffd" in docs[4].text and log.counters["repaired:invalid_utf8"] == 1
    assert log.counters["skipped_records:request"] == 5
    assert [d.id for d in docs] == [d.meta["url"] for d in docs] and all(d.meta["dataset"] == "cc" for d in docs)


def test_a_repeated_warc_uri_takes_its_record_id_and_jsonl_ids_their_file(tmp_path):
    path = tmp_path / "again.warc.gz"
    _warc(path, [("https://a.org/", 200, "text/html", b"<p>one</p>"), ("https://a.org/", 200, "text/html", b"<p>two</p>")])
    ids = DocumentIds()
    docs = list(read_documents(path, RecordLog(), ids=ids))
    assert docs[0].id == "https://a.org/" and docs[1].id.startswith("https://a.org/ urn:uuid:")
    assert len({d.id for d in docs}) == 2  # the record ids differ: the second one is unique too
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(_lines({"id": "7", "text": "x"}, {"text": "no id"}, {"id": "7", "text": "again"}))
    second.write_bytes(_lines({"id": "7", "text": "y"}))
    ids = DocumentIds()
    got = [d.id for path in (first, second) for d in read_documents(path, RecordLog(), name=path.name, ids=ids)]
    assert got == ["7", "a.jsonl:2", "a.jsonl:7", "b.jsonl:7"]
    lines = [json.loads(line)["id"] for line in record_lines(first, RecordLog(), name="sub/a.jsonl", ids=DocumentIds())]
    assert lines == ["7", "sub/a.jsonl:2", "sub/a.jsonl:7"]  # the quick path names them alike


@pytest.mark.parametrize("name", ["cut.warc", "cut.warc.gz"])
def test_truncated_warc_is_counted_and_earlier_records_kept(tmp_path, name):
    path = tmp_path / name
    _warc(path, [(f"https://x.org/{i}", 200, "text/html", b"<p>" + b"page body " * 300 + b"</p>")
                 for i in range(6)], gz=name.endswith(".gz"))
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * 0.6)])
    docs, log = _read(path)
    assert 1 <= len(docs) < 6
    assert log.counters["in"] == log.counters["out"] + sum(v for k, v in log.counters.items() if k.startswith("dropped:"))
    assert log.counters["dropped:truncated_record"] == 1  # the cut costs one record, no more
    assert log.errors and log.errors[0]["file"] == str(path)


def test_html_file_and_unsupported_suffix(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("<html><body><p>Hello</p></body></html>")
    docs, _ = _read(page)
    assert docs[0].meta["content_type"] == "text/html" and docs[0].meta["url"].startswith("file://")
    with pytest.raises(CurateError, match="unsupported file type"):
        _read(tmp_path / "notes.txt")
