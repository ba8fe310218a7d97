"""The site_lines stage on a generated corpus of sites with planted templates (sample_sites): what
it removes (recall), what it keeps (precision, content uses of template strings), its counters and
thresholds, the drop log, 1 vs 2 worker processes, and that the driver receives only counts."""
import json
import random
import re

import pytest
import xxhash

from trident.curate.document import CurateError, Document
from trident.curate.droplog import log_path, read_log
from trident.curate.filters.site_lines import line_key, line_keys, strip_template, template_region
from trident.curate.filters.site_shapes import STRONG, WEAK, fold
from trident.curate.read.shards import read_shard, write_shard
from trident.curate.run.executors import LocalExecutor
from trident.curate.run.pipeline import load_pipeline_config, run_pipeline
from trident.curate.run.registry import build_stage
from trident.curate.samples.sites import score, site_corpus
from trident.text.storage import location

pytestmark = pytest.mark.timeout(60)


def config_params(overrides=()):
    """The site_lines parameters of the shipped curate-cc config (with overrides)."""
    spec = next(s for s in load_pipeline_config("curate-cc", list(overrides)).stages if s["stage"] == "site_lines")
    return {k: v for k, v in spec.items() if k not in ("stage", "enabled")}


def run_stage(docs, folder, params, executor=None, shards=2):
    inputs = [folder / f"in-{i}.jsonl.zst" for i in range(shards)]
    for i, path in enumerate(inputs):
        write_shard(path, docs[i::shards])
    stage = build_stage("site_lines", params)
    outputs = stage.run(inputs, folder / "out", executor or LocalExecutor(1, progress=False))
    return stage, outputs, [doc for path in outputs for doc in read_shard(path)]


@pytest.fixture(scope="module")
def corpus():
    return site_corpus(seed=0)


@pytest.fixture(scope="module")
def default_run(corpus, tmp_path_factory):
    return run_stage(corpus.docs, tmp_path_factory.mktemp("default"), config_params())


def test_a_pages_line_keys_folded_at_once_equal_each_lines_own():
    lines = ["Straße 12", "  ΣΑΣ  x\u2028y", "İstanbul\t3", "", "Page 3 of 12"]
    assert line_keys(lines) == [line_key(line) for line in lines] and line_keys([]) == []
    assert line_key("Page 3 of 12") == line_key("page  7 OF 1")
    # the keys' white space collapse on the lines joined equals each line's own words joined
    rng = random.Random(5)
    alphabet = "ab Z9 \t\r\x0b\x0c\x1c\x85\xa0\u2003\u2028\u3000ßİ"
    for _ in range(500):
        lines = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(8))) for _ in range(rng.randrange(1, 6))]
        want = [xxhash.xxh3_64_intdigest(" ".join(fold(line).split()).encode("utf-8")) for line in lines]
        assert line_keys(lines) == want, lines


def test_fold_makes_each_run_of_digits_one_zero_in_ascii_and_any_script():
    """fold's quick paths (digits made 0, then runs of 0 one; on the UTF-8 bytes of a text whose
    only digits are ASCII) equal the digit-run rule."""
    rng = random.Random(3)
    alphabet = "aZ09 5\n7x.-00" + "٣٤ßİΣé"  # Arabic-Indic digits count as digits too
    for _ in range(2000):
        text = "".join(rng.choice(alphabet[:14] if rng.random() < 0.5 else alphabet) for _ in range(rng.randrange(30)))
        assert fold(text) == re.sub(r"\d+", "0", text.casefold())
    assert fold("Page 10 of 2007") == "page 0 of 0" and fold("x٣٤2") == "x0"
    assert fold("Größe 10—20 ¶ 007") == "grösse 0—0 ¶ 0"  # non-ASCII text, ASCII digits


def test_template_region_keeps_lone_template_lines_inside_the_page():
    t, c = True, False
    assert template_region([t, t, c, t, c, t, t, c, t], 2) == [t, t, c, c, c, t, t, c, t]
    assert template_region([t, c, t, c], 1) == [t, c, t, c]
    assert template_region([c, t, t, c], 3) == [c, c, c, c]
    keys = {line_key(x) for x in ("Home", "Docs", "Share", "Tweet", "© 2024 Site", "Last updated 2024-1-2")}
    text = ("Home\nDocs\n\nTitle\n\nOne.\n\nDocs\n\nTwo.\n\nshare\n  Tweet \n\nThree.\n\n"
            "© 2023 Site\nLast updated 2019-11-30")
    # "Docs" between paragraphs is content; case, spacing and digits do not make a line different
    assert strip_template(text, keys, 2) == ("Title\n\nOne.\n\nDocs\n\nTwo.\n\nThree.", 6)
    assert strip_template(text, set(), 2) == (text, 0)


def test_a_page_that_opens_with_its_title_keeps_the_heading_under_it():
    t, c = True, False
    # a man page: its title (a weak shape: "git-add(1) Manual Page"), NAME on every page, its summary
    assert template_region([WEAK, 1, c, c, 1, 1], 2) == [c, c, c, c, t, t]
    assert template_region([WEAK, 1, 1, c], 2) == [c, t, t, c]  # a menu under the title still goes
    assert template_region([WEAK, STRONG, c], 2) == [c, t, c]  # and a navigation line
    assert template_region([1, WEAK, c], 2) == [t, t, c]  # a title under a site's header: as before
    assert template_region([WEAK, 1], 2) == [c, t]  # a page of a title and template only


def test_template_lines_removed_and_articles_kept(corpus, default_run):
    stage, _, docs = default_run
    large = {host for host, n in corpus.host_pages.items() if n >= config_params()["min_host_docs"]}
    s = score(corpus, docs, large)
    print(f"\nsite_lines defaults {config_params()}: recall {s['recall']:.3f} precision {s['precision']:.3f} "
          f"({s['template:removed']} of {s['template:removed'] + s['template:kept']} template lines removed; "
          f"article lines removed {s['content:removed']}; menu item as subheading kept {s['content_use:kept']}"
          f"/{s['content_use:kept'] + s['content_use:removed']})")
    assert s["recall"] >= 0.95 and s["precision"] >= 0.99
    assert s["content:removed"] == 0 and s["content_use:removed"] == 0 and s["content_use:kept"] > 0
    assert s["shared_heading:kept"] > 0.8 * (s["shared_heading:kept"] + s["shared_heading:removed"])
    out = {doc.id: doc.text for doc in docs}
    copies = {out[i] for i in corpus.copies}
    assert len(copies) == 1 and score(corpus, docs, {"site-4.example"})["content:removed"] == 0
    c = stage.counters
    assert c["in"] == len(corpus.docs) == c["out"] + c["dropped:site_boilerplate"]
    assert c["docs_changed"] == sum(doc.text != out.get(doc.id) for doc in corpus.docs)
    assert c["lines_removed"] == sum(v for k, v in score(corpus, docs).items() if k.endswith(":removed"))
    assert (c["hosts"], c["hosts_with_template"], c["no_url"]) == (7, 5, len(corpus.no_url))
    assert c["template_lines"] > 5 * 10 and c["bytes_out"] < c["bytes_in"]


def test_small_hosts_and_pages_without_url_are_untouched(corpus, default_run):
    docs = {doc.id: doc.text for doc in default_run[2]}
    small = [doc for doc in corpus.docs if corpus.host_pages.get(doc.id.split("/")[0], 10) < 10]
    assert {doc.id.split("/")[0] for doc in small} == {"site-5.example", "site-6.example"}
    assert all(docs[doc.id] == doc.text for doc in small)
    assert all(docs[doc_id] == next(d.text for d in corpus.docs if d.id == doc_id) for doc_id in corpus.no_url)


def test_thresholds_come_from_the_config(corpus, tmp_path):
    assert config_params() == {"min_docs": 5, "min_fraction": 0.3, "min_host_docs": 10, "min_run": 2, "shapes": True}
    stage, _, docs = run_stage(corpus.docs, tmp_path / "big", config_params(["stages.site_lines.min_host_docs=100"]))
    assert stage.counters["lines_removed"] == 0
    assert {d.id: d.text for d in docs} == {d.id: d.text for d in corpus.docs}
    stage, _, docs = run_stage(corpus.docs, tmp_path / "small", config_params(["stages.site_lines.min_host_docs=5",
                                                                          "stages.site_lines.min_docs=3"]))
    assert score(corpus, docs, {"site-5.example"})["template:removed"] > 0  # the 8-page host now cleaned
    edges = run_stage(corpus.docs, tmp_path / "edges", config_params(["stages.site_lines.min_run=1000"]))[2]
    share = [d for d in edges if "Share this article" in d.text]
    assert share and score(corpus, edges)["recall"] < score(corpus, docs)["recall"]
    for bad in ({"min_fraction": 0}, {"min_docs": 1}, {"min_run": 0}, {"min_fraction": "x"}, {"shapes": "yes"}):
        with pytest.raises(CurateError, match="site_lines"):
            build_stage("site_lines", bad)


def test_pages_of_template_only_are_dropped_and_logged(tmp_path):
    nav, words = ["Home", "Docs", "Blog", "Contact"], "one two three four five six seven eight nine ten".split()
    articles = [f"Article {word} says something of its own." for word in words]  # digits would compare equal
    docs = [Document(id=f"p{i}", text="\n".join(nav + [article]), meta={"url": f"https://site.example/{i}"})
            for i, article in enumerate(articles)]
    docs += [Document(id=f"index{i}", text="\n".join(nav[i:] + nav[:i]), meta={"url": f"https://site.example/x{i}"})
             for i in range(2)]
    docs.append(Document(id="empty", text="", meta={"url": "https://site.example/empty"}))  # not ours to drop
    stage, outputs, kept = run_stage(docs, tmp_path, {}, shards=1)
    assert [d.text for d in kept] == articles + [""]
    assert stage.counters["dropped:site_boilerplate"] == 2 and stage.counters["lines_removed"] == 48
    records = list(read_log(log_path(outputs[0])))
    assert records == [{"id": f"index{i}", "url": f"https://site.example/x{i}", "stage": "site_lines",
                        "reason": "site_boilerplate"} for i in range(2)]


class RecordingExecutor(LocalExecutor):
    """A local executor that keeps what every task returned to the driver."""

    def __init__(self, workers):
        super().__init__(workers, progress=False)
        self.returned = []

    def map(self, fn, items, desc=None):
        results = super().map(fn, items, desc)
        self.returned += results
        return results


def test_driver_receives_only_counts(corpus, tmp_path):
    executor = RecordingExecutor(1)
    run_stage(corpus.docs, tmp_path, {}, executor, shards=3)
    assert len(executor.returned) == 3 + 16 + 3
    for result in executor.returned:
        values = result.values() if isinstance(result, dict) else [result]
        assert all(type(v) is int for v in values) and len(values) <= 12
        assert len(json.dumps(result)) < 400


def test_one_and_two_workers_give_identical_results(corpus, tmp_path):
    inputs = []
    for i in range(3):
        inputs.append(tmp_path / f"part-{i}.jsonl")
        inputs[-1].write_text("".join(json.dumps(d.to_json()) + "\n" for d in corpus.docs[i::3]))
    config = {"stages": [{"stage": "site_lines", **config_params()}], "progress": False}
    one = run_pipeline(config, inputs, tmp_path / "one", workers=1)
    two = run_pipeline(config, inputs, tmp_path / "two", workers=2)
    assert one["accounting"]["ok"] and two["accounting"]["ok"]
    assert [s["counters"] for s in one["stages"]] == [s["counters"] for s in two["stages"]]
    docs = [[d for shard in run["output"]["shards"] for d in read_shard(shard)] for run in (one, two)]
    assert docs[0] == docs[1] and one["stages"][1]["counters"]["lines_removed"] > 0


def test_every_file_on_object_storage(corpus, default_run, s3):
    """Shards, partition files and template files on an S3 prefix (moto): the same result."""
    stage, outputs, docs = run_stage(corpus.docs, location(s3.url("site_lines")), {**config_params(), "partitions": 4})
    assert str(outputs[0]).startswith("s3://") and docs == default_run[2]
    assert stage.counters == default_run[0].counters
    assert not location(s3.url("site_lines/out/_work_site_lines")).exists()
