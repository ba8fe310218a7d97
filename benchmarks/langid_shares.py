"""How much of each real documentation page `langid` finds English, by parts (issue 60 item 4): the
share of English at several `min_share` values on the HTML of Debian's documentation packages
(`apt-get install python3-doc postgresql-doc git-doc debian-handbook`), extracted as `extract` does,
and how many handbook pages whose letters are more than a tenth Chinese would pass. The baseline
row counts every part, sure or not (PART_CONFIDENCE 0), in the same process.

    python benchmarks/langid_shares.py [--shares 0.9,0.8,0.7]
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from common import emit_json, print_table
from trident.curate.document import Document
from trident.curate.extract import langid
from trident.curate.run.registry import build_stage

FOLDERS = {"python3-doc": "/usr/share/doc/python3-doc/html", "postgresql-doc-15": "/usr/share/doc/postgresql-doc-15/html",
           "git-doc": "/usr/share/doc/git-doc"}
FOLDERS.update({f"debian-handbook {lang}": f"/usr/share/doc/debian-handbook/html/{lang}"
                for lang in ("en-US", "nl-NL", "zh-CN", "de-DE")})
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def extracted(folder: str) -> list[str]:
    """The main text of every .html page under ``folder``, as the default `extract` stage leaves it."""
    stage = build_stage("extract", {})
    texts = []
    for path in sorted(p for p in Path(folder).rglob("*.html") if p.is_file()):
        doc = Document(path.name, path.read_bytes().decode("utf-8", "replace"),
                       {"content_type": "text/html", "http_status": 200})
        result = stage.apply(doc)
        if not isinstance(result, str) and result.text.strip():
            texts.append(result.text)
    return texts


def english_share(text: str) -> float:
    _, share = langid.judge_parts(langid.fasttext_guesses(), langid.text_parts(text, 10_000))
    return share.get("en", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="0.9,0.8,0.7")
    args = parser.parse_args()
    cuts = [float(v) for v in args.shares.split(",")]
    rows, payload = [], {}
    for name, folder in FOLDERS.items():
        texts = extracted(folder)
        if not texts:
            print(f"{name}: no pages under {folder} (apt-get install it)")
            continue
        chinese = [len(CJK.findall(t)) / max(langid.letters(t), 1) > 0.1 for t in texts]
        for confidence, label in ((langid.PART_CONFIDENCE, "sure parts"), (0.0, "every part (baseline)")):
            saved, langid.PART_CONFIDENCE = langid.PART_CONFIDENCE, confidence
            shares = [english_share(t) for t in texts]
            langid.PART_CONFIDENCE = saved
            kept = [sum(s >= cut for s in shares) / len(shares) for cut in cuts]
            passing = [sum(s >= cut and c for s, c in zip(shares, chinese)) for cut in cuts]
            rows.append([name, label, len(texts), *kept, sum(chinese), *passing])
            payload[f"{name} / {label}"] = {"n": len(texts), "kept": kept, "chinese_passing": passing}
    print_table("English share by parts (fastText lid.176), fraction of pages at or above min_share",
                ["pages", "parts counted", "n", *(f"kept at {c}" for c in cuts), "> 1/10 Chinese",
                 *(f"of those kept at {c}" for c in cuts)], rows)
    emit_json("langid_shares", payload)


if __name__ == "__main__":
    main()
