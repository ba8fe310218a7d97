"""A damaged WARC record costs that record only: it is counted with its file and byte offset, reading
resumes at the next gzip member (.warc.gz) or record (.warc), and the accounting check holds."""
import gzip
import io
import json
import random
import tracemalloc
import zlib

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from trident.cli import main
from trident.curate.droplog import read_log
from trident.curate.read.record_log import RecordLog
from trident.curate.read.shards import read_documents, read_shard
from trident.curate.run.pipeline import check_accounting, run_pipeline
from trident.curate.samples.crawl import write_sample_warc
from trident.text.damage import damage_summary, lost_by_file

STATUS = b"HTTP/1.1 200 OK"


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The undamaged sample WARC (.warc.gz), its records [(offset, length, type, url)] and URLs read."""
    path = tmp_path_factory.mktemp("clean") / "clean.warc.gz"
    write_sample_warc(path, n_docs=30)
    with open(path, "rb") as fh:
        records = ArchiveIterator(fh)
        table = []
        for record in records:
            kind, url = record.rec_type, record.rec_headers.get_header("WARC-Target-URI")
            records.read_to_end()
            table.append((records.get_record_offset(), records.get_record_length(), kind, url))
    return path.read_bytes(), table, [d.meta["url"] for d in _read_bytes(path)[0]]


def _read_bytes(path):
    log = RecordLog()
    return list(read_documents(path, log)), log


def _balanced(log):
    dropped = sum(v for k, v in log.counters.items() if k.startswith("dropped:"))
    return log.counters["in"] == log.counters["out"] + dropped


def _pages(table):
    """The records of HTML pages served with status 200 (each its own gzip member)."""
    return [r for r in table if r[2] == "response" and not r[3].endswith(("/missing", ".pdf", ".png"))]


def _edit_member(data, record, edit):
    """`data` with one member's inflated bytes passed through `edit` and compressed again."""
    offset, length = record[0], record[1]
    member = gzip.compress(edit(zlib.decompress(data[offset:offset + length], 31)))
    return data[:offset] + member + data[offset + length:]


def _bad_status(raw):
    # same length, so Content-Length still frames the record
    return raw.replace(STATUS, b"\x00\x17garbage-garba", 1)


def _bad_header(raw):
    return b"XX" + raw[2:]  # "WARC/1.0" -> "XXRC/1.0"


def _members(data):
    """[(offset, inflated bytes)] of every gzip member of `data`."""
    found, offset = [], 0
    while offset < len(data):
        member = zlib.decompressobj(31)
        found.append((offset, member.decompress(data[offset:])))
        offset = len(data) - len(member.unused_data)
    return found


def _plain(data):
    """A .warc.gz's records as a plain .warc, and each record's offset in it."""
    inflated = [raw for _, raw in _members(data)]
    offsets = [sum(len(raw) for raw in inflated[:i]) for i in range(len(inflated))]
    return b"".join(inflated), offsets


@pytest.mark.timeout(60)
def test_a_flipped_byte_costs_only_its_gzip_member(tmp_path, clean):
    data, table, urls = clean
    victim = _pages(table)[3]
    damaged = bytearray(data)
    damaged[victim[0] + victim[1] // 2] ^= 0x10
    path = tmp_path / "flip.warc.gz"
    path.write_bytes(bytes(damaged))
    docs, log = _read_bytes(path)
    assert [d.meta["url"] for d in docs] == [u for u in urls if u != victim[3]]
    assert log.counters["dropped:damaged_gzip_member"] == 1 and _balanced(log)
    assert log.errors == [{"file": str(path), "position": f"byte {victim[0]}", "reason": "damaged_gzip_member",
                           "detail": log.errors[0]["detail"]}]
    assert lost_by_file(log.counters) == {str(path): {"damaged_gzip_member": 1}}


@pytest.mark.timeout(60)
def test_a_broken_gzip_header_is_counted_and_the_next_member_found(tmp_path, clean):
    data, table, urls = clean
    victim = _pages(table)[5]
    path = tmp_path / "magic.warc.gz"
    path.write_bytes(data[:victim[0] + 1] + b"\x8c" + data[victim[0] + 2:])  # gzip's magic 1f 8b, one bit off
    docs, log = _read_bytes(path)
    assert len(docs) == len(urls) - 1 and victim[3] not in {d.meta["url"] for d in docs}
    assert log.errors[0]["position"] == f"byte {victim[0]}" and _balanced(log)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("edit, reason", [(_bad_status, "bad_http_block"), (_bad_header, "malformed_warc_record")])
def test_an_unparseable_record_costs_only_itself(tmp_path, clean, gz, edit, reason):
    data, table, urls = clean
    index = table.index(_pages(table)[7])
    damaged = _edit_member(data, table[index], edit)
    offset = table[index][0]
    if not gz:
        damaged, offsets = _plain(damaged)
        offset = offsets[index]
    path = tmp_path / ("bad.warc.gz" if gz else "bad.warc")
    path.write_bytes(damaged)
    docs, log = _read_bytes(path)
    assert [d.meta["url"] for d in docs] == [u for u in urls if u != table[index][3]]
    assert log.counters[f"dropped:{reason}"] == 1 and _balanced(log)
    assert (log.errors[0]["file"], log.errors[0]["position"], log.errors[0]["reason"]) == (
        str(path), f"byte {offset}", reason)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gz", [True, False])
def test_a_cut_off_tail_costs_the_last_record(tmp_path, clean, gz):
    data, table, urls = clean
    offset, length, kind, url = table[-1]
    assert kind == "response"
    if gz:
        damaged = data[:offset + length // 2]
    else:
        plain, offsets = _plain(data)
        offset = offsets[-1]
        damaged = plain[:(offset + len(plain)) // 2]  # inside the block
    path = tmp_path / ("cut.warc.gz" if gz else "cut.warc")
    path.write_bytes(damaged)
    docs, log = _read_bytes(path)
    assert [d.meta["url"] for d in docs] == urls[:-1] and urls[-1] == url
    assert log.counters["dropped:truncated_record"] == 1 and _balanced(log)
    assert log.errors[0]["position"] == f"byte {offset}"


@pytest.mark.timeout(120)
def test_all_four_damages_in_one_file_pass_the_accounting_check(tmp_path, clean, capsys):
    data, table, _ = clean
    pages = _pages(table)
    flip, status, header, last = pages[2], pages[9], pages[14], table[-1]
    assert last[2] == "response"
    # edit members from the back so that earlier offsets stay valid
    damaged = data
    for record, edit in sorted([(status, _bad_status), (header, _bad_header)], reverse=True):
        damaged = _edit_member(damaged, record, edit)
    offsets = [offset for offset, _ in _members(damaged)]  # the edited members' lengths changed
    at = {record[3]: offsets[table.index(record)] for record in (flip, status, header, last)}
    damaged = bytearray(damaged[:(at[last[3]] + len(damaged)) // 2])  # cut inside the last member
    damaged[at[flip[3]] + flip[1] // 2] ^= 0x01
    (tmp_path / "clean.warc.gz").write_bytes(data)
    path = tmp_path / "damaged.warc.gz"
    path.write_bytes(damaged)
    config = {"stages": [{"stage": "extract"}], "progress": False}
    clean_stats = run_pipeline(config, [tmp_path / "clean.warc.gz"], tmp_path / "clean-out")
    stats = run_pipeline(config, [path], tmp_path / "out")  # raises CurateError when the accounting fails
    assert stats["accounting"] == {"ok": True, "problems": []} and check_accounting(stats["stages"]) == []
    read, clean_read = stats["stages"][0]["counters"], clean_stats["stages"][0]["counters"]
    assert read["in"] == clean_read["in"] and read["out"] == clean_read["out"] - 4
    kept, clean_kept = ({d.meta["url"] for shard in run["output"]["shards"] for d in read_shard(shard)}
                        for run in (stats, clean_stats))
    assert set(at) <= clean_kept and kept == clean_kept - set(at)
    assert damage_summary(read) == [f"{path}: 4 records lost (bad_http_block 1, damaged_gzip_member 1, "
                                    f"malformed_warc_record 1, truncated_record 1)"]
    assert {(e["position"], e["reason"]) for e in stats["errors"]} == {
        (f"byte {at[flip[3]]}", "damaged_gzip_member"), (f"byte {at[status[3]]}", "bad_http_block"),
        (f"byte {at[header[3]]}", "malformed_warc_record"), (f"byte {at[last[3]]}", "truncated_record")}
    summary = damage_summary(read)[0]
    assert f"## Damaged input files\n\n- {summary}" in (tmp_path / "out" / "report.md").read_text()
    (tmp_path / "extract.yaml").write_text(json.dumps(config))  # JSON is YAML
    assert main(["curate", str(tmp_path / "extract.yaml"), "--input", str(path), "--out", str(tmp_path / "cli")]) == 0
    assert f"damaged input: {summary}" in capsys.readouterr().out
    drops = [r for log in (tmp_path / "cli" / "drops").glob("*/*") for r in read_log(log) if r["stage"] == "read"]
    assert sorted((r["reason"], r["position"]) for r in drops) == sorted(
        (e["reason"], f"{path} {e['position']}") for e in stats["errors"])


@pytest.mark.timeout(60)
def test_per_file_counts_stay_exact_beyond_the_examples_kept(tmp_path):
    path = tmp_path / "many.warc"
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=False)
        for i in range(230):
            status = "200 OK" if i % 10 else "20x OK"  # every tenth has no valid status code
            http = StatusAndHeaders(status, [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(f"https://x.org/{i}", "response", http_headers=http,
                                                          payload=io.BytesIO(b"<p>page %d</p>" % i)))
    path.write_bytes(path.read_bytes() * 10)  # 2300 records, 230 of them bad
    docs, log = _read_bytes(path)
    assert len(docs) == 2070 and len(log.errors) == 200 and _balanced(log)
    assert lost_by_file(log.counters) == {str(path): {"bad_http_block": 230}}
    assert damage_summary(log.counters) == [f"{path}: 230 records lost (bad_http_block 230)"]


@pytest.mark.timeout(60)
def test_damage_summary_reads_counters_and_tokenize_stats():
    counters = {"in": 9, "out": 5, "dropped:too_large": 1, "lost:s3://b/x:1.warc.gz:bad_http_block": 1,
                "lost:a.warc.gz:damaged_gzip_member": 2, "lost:a.warc.gz:truncated_record": 1}
    assert damage_summary(counters) == ["a.warc.gz: 3 records lost (damaged_gzip_member 2, truncated_record 1)",
                                        "s3://b/x:1.warc.gz: 1 record lost (bad_http_block 1)"]
    assert damage_summary({"t.jsonl.gz": {"malformed_json": 2, "unreadable_file": 1, "lines_before": 40}}) == [
        "t.jsonl.gz: 3 records lost (malformed_json 2, unreadable_file 1); unreadable after line 40, "
        "the rest of the file is lost"]
    assert damage_summary({}) == [] and damage_summary({"in": 3, "out": 3}) == []


@pytest.mark.timeout(60)
def test_a_whole_file_gzip_member_is_read_record_by_record(tmp_path, clean):
    data, _, urls = clean
    path = tmp_path / "one-member.warc.gz"
    path.write_bytes(gzip.compress(_plain(data)[0]))
    docs, log = _read_bytes(path)
    assert [d.meta["url"] for d in docs] == urls and not log.errors


@pytest.mark.timeout(120)
def test_any_single_flipped_byte_costs_at_most_one_record(tmp_path, clean):
    data, _, urls = clean
    rng = random.Random(7)
    path = tmp_path / "fuzz.warc.gz"
    for _ in range(60):
        damaged = bytearray(data)
        damaged[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(damaged))
        docs, log = _read_bytes(path)
        assert len(docs) >= len(urls) - 1 and _balanced(log)
        assert sum(v for k, v in log.counters.items() if k.startswith("dropped:")) <= 1


@pytest.mark.timeout(60)
def test_a_member_inflated_in_many_pieces_ends_where_it_ends(tmp_path):
    # a 20 MB page compresses to a few KB: inflated over many bounded zlib calls, the next member follows
    path = tmp_path / "big.warc.gz"
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for i, size in enumerate([10, 20_000_000, 10]):
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(f"https://x.org/{i}", "response", http_headers=http,
                                                          payload=io.BytesIO(b"<p>" + b"x" * size + b"</p>")))
    tracemalloc.start()
    try:
        log = RecordLog()
        docs = list(read_documents(path, log, max_doc_bytes=1_000_000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [d.meta["url"] for d in docs] == ["https://x.org/0", "https://x.org/2"]
    assert dict(log.counters) == {"in": 3, "out": 2, "dropped:too_large": 1}
    assert peak < 16 << 20  # bounded pieces, never the 20 MB page
