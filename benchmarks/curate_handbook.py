"""The wanted language on a real, partly translated handbook (issue 60 items 4-5): Debian's
debian-handbook HTML in en-US, nl-NL, zh-CN and de-DE (`apt-get install debian-handbook`), curated
into an English corpus by `curate-cc` (one worker), checked for:

  A. no kept page whose letters are more than a tenth Chinese (CJK ideographs and kana over all letters);
  B. no page kept in another language when its en-US copy was dropped as its duplicate (the en-US
     page's drop record names the copy kept): counted by content (the kept copy holds parts in
     another language: its English share under 0.99) and by folder (any copy from another folder,
     an untranslated page too, whose text equals the en-US one but for spaces);

as shipped; with each folder its own `dataset` and `priority: [en-US]` in both dedup stages (the
copies equal in language then go by folder); and, in the same process, the old choices
(`min_share: 0`, the copies ordered by dataset priority, quality and length only) as the baseline.

    python benchmarks/curate_handbook.py [--root /usr/share/doc/debian-handbook/html] [--languages en-US,nl-NL,zh-CN,de-DE]
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import emit_json, print_table
from trident.curate.droplog import read_log
from trident.curate.read.shards import read_shard
from trident.curate.run.pipeline import run_pipeline

CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
NON_LETTERS = re.compile(r"[\W\d_]+")
PRIORITY = ["stages.fuzzy_dedup.priority=[en-US]", "stages.exact_dedup.priority=[en-US]"]
SETTINGS = {"trident as shipped": [], "folders as datasets, priority [en-US]": PRIORITY,
            "old choices (baseline)": ["stages.langid.min_share=0", "stages.fuzzy_dedup.keep=[priority,quality,length]",
                                       "stages.exact_dedup.keep=[priority,quality,length]"]}


def cjk_share(text: str) -> float:
    return len(CJK.findall(text)) / max(len(NON_LETTERS.sub("", text)), 1)


def folder_of(url: str, languages: list[str]) -> str:
    return next((lang for lang in languages if f"/{lang}/" in url), "?")


def curate(files: list[Path], overrides: list[str], out: Path, languages: list[str]) -> dict:
    """One run and its checks: kept pages by folder, A and B violations, seconds."""
    start = time.perf_counter()
    if any("priority" in o for o in overrides):  # each file its folder's dataset
        entries = ", ".join(f"{{path: '{f}', dataset: {folder_of(f.as_uri(), languages)}}}" for f in files)
        overrides, files = overrides + [f"inputs=[{entries}]"], []
    stats = run_pipeline("curate-cc", files, out, workers=1, overrides=["progress=false"] + overrides)
    seconds = time.perf_counter() - start
    kept = [doc for path in stats["output"]["shards"] for doc in read_shard(path)]
    drops = [r for log in sorted((out / "drops").glob("*/*.drops.jsonl.zst")) for r in read_log(log)]
    by_id: dict[str, list] = {}
    for doc in kept:
        by_id.setdefault(doc.id, []).append(doc)
    chinese = [doc.meta["url"] for doc in kept if cjk_share(doc.text) > 0.1]
    wrong_copy, ambiguous = [], 0
    for record in drops:
        if record["reason"] != "duplicate" or folder_of(record["url"], languages) != "en-US":
            continue
        copies = by_id.get(record.get("kept", ""), [])
        ambiguous += len(copies) != 1
        if copies and all(folder_of(d.meta["url"], languages) != "en-US" for d in copies):
            wrong_copy.append((record["url"], copies[0].meta["url"], copies[0].meta.get("language_share")))
    reasons = Counter(f"{r['stage']}:{r['reason']}" for r in drops)
    return {"seconds": round(seconds, 1), "kept": Counter(folder_of(d.meta["url"], languages) for d in kept),
            "chinese_kept": chinese, "wrong_copy": wrong_copy,
            "wrong_language": [w for w in wrong_copy if (w[2] if w[2] is not None else 0) < 0.99], "ambiguous_kept_ids": ambiguous,
            "distinct_ids": len(by_id), "drops": dict(reasons.most_common())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/usr/share/doc/debian-handbook/html")
    parser.add_argument("--languages", default="en-US,nl-NL,zh-CN,de-DE")
    args = parser.parse_args()
    languages = args.languages.split(",")
    files = sorted(p for lang in languages for p in (Path(args.root) / lang).glob("*.html"))
    if not files:
        sys.exit(f"no HTML pages under {args.root}/{{{args.languages}}}: apt-get install debian-handbook")
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for number, (name, overrides) in enumerate(SETTINGS.items()):
            result = curate(files, overrides, Path(tmp) / f"out{number}", languages)
            results[name] = result
            rows.append([name, len(files), *(result["kept"].get(lang, 0) for lang in languages),
                         len(result["chinese_kept"]), len(result["wrong_language"]), len(result["wrong_copy"]),
                         result["seconds"]])
    print_table(f"curate-cc on debian-handbook ({', '.join(languages)}), English corpus",
                ["setting", "pages", *(f"kept {lang}" for lang in languages),
                 "kept > 1/10 Chinese (A)", "B: content", "B: folder", "s"], rows)
    for name, result in results.items():
        print(f"\n{name}: drops {result['drops']}; kept ids {result['distinct_ids']}, "
              f"ambiguous kept ids {result['ambiguous_kept_ids']}")
        for dropped, kept, share in (result["wrong_language"] or result["wrong_copy"])[:5]:
            print(f"  B: {dropped} dropped for {kept} (English share {share})")
    shipped = results["trident as shipped"]
    print(f"\nas shipped: A {'met' if not shipped['chinese_kept'] else 'MISSED'}, "
          f"B by content {'met' if not shipped['wrong_language'] else 'MISSED'}")
    emit_json("curate_handbook", {name: {**r, "kept": dict(r["kept"]), "chinese_kept": len(r["chinese_kept"]),
                                         "wrong_copy": len(r["wrong_copy"]), "wrong_language": len(r["wrong_language"])}
                                  for name, r in results.items()})


if __name__ == "__main__":
    main()
