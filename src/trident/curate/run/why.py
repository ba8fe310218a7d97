"""`trident curate why OUT URL|ID`: where a document went in a finished curation run.

Looks the key (a document id, its URL, or for an unreadable input record its file and byte/line)
up in OUT/drops/ (every dropped document, with stage, reason and score) and in OUT's shards (the
kept documents). The shards are scanned as raw lines, and only a line that contains the key is
decoded, so the cost is one read of the output (like grep).
"""
from __future__ import annotations

from pathlib import Path

from trident.curate.droplog import SUFFIX, read_log
from trident.curate.read.shard_lines import parse_document, shard_lines
from trident.text.storage import location


def dropped(out_dir: Path | str, key: str) -> list[dict]:
    """Drop records whose id or URL is `key` (or, for unread input records, whose position holds it)."""
    found = []
    for log in sorted(location(out_dir).glob(f"drops/*/*{SUFFIX}"), key=str):
        for record in read_log(log):
            if key in (record["id"], record["url"]) or (not record["id"] and key in record.get("position", "")):
                found.append(record | {"log": str(log)})
    return found


def kept(out_dir: Path | str, key: str) -> list[dict]:
    """{"shard", "line", "id", "url"} of every output document whose id or URL is `key`."""
    needle, found = key.encode("utf-8"), []
    for shard in sorted(location(out_dir).glob("shard-*.jsonl.zst"), key=str):
        for number, data in shard_lines(shard):
            if needle not in data:  # most lines: no JSON decoding at all
                continue
            doc = parse_document(shard, number, data)
            if key in (doc.id, doc.meta.get("url")):
                found.append({"shard": str(shard), "line": number, "id": doc.id, "url": doc.meta.get("url", "")})
    return found


def describe(record: dict, key: str | None = None) -> str:
    """One line for a drop record (naming its id where that is not `key`: a URL two documents share)."""
    score = f", score {record['score']}" if "score" in record else ""
    kept = f", kept {record['kept']} (similarity {record.get('similarity')})" if record.get("kept") else ""
    where = f" at {record['position']}" if record.get("position") else ""
    detail = f" ({record['detail']})" if record.get("detail") else ""
    named = f" as {record['id']}" if record.get("id") and record["id"] != key else ""
    return (f"dropped{named} by {record['stage']}: {record['reason']}{score}{kept}{where}{detail} "
            f"[{record['log']}]")


def why(out_dir: Path | str, key: str) -> tuple[list[str], dict]:
    """(lines to print, {"dropped": [...], "kept": [...]}) for `key` in the run at `out_dir`."""
    out = location(out_dir)
    if not (out / "stats.json").exists():
        raise FileNotFoundError(f"{out}: not a finished `trident curate` output (no stats.json)")
    result = {"dropped": dropped(out, key), "kept": kept(out, key)}
    lines = [f"{key}: {describe(record, key)}" for record in result["dropped"]]
    lines += [f"{key}: kept as {doc['id']} in {doc['shard']} line {doc['line']}" for doc in result["kept"]]
    if not lines:
        lines = [f"{key}: not in {out}'s drop logs nor in its shards (not among the inputs? ids and URLs "
                 f"are matched exactly)"]
    return lines, result
