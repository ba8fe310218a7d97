"""The extract and langid stages' backends: each one turns the sample WARC into the right text and
languages, the defaults are the measured choices (resiliparse, fastText), and an unknown backend is
a config error naming the key (`trident curate` exits 2 before reading any input)."""
import json

import pytest

from trident.cli import main
from trident.config import ConfigError
from trident.curate.document import CurateError, Document
from trident.curate.extract.langid import bundled_fasttext_model
from trident.curate.read.record_log import RecordLog
from trident.curate.read.shards import read_documents
from trident.curate.run.pipeline import load_pipeline_config
from trident.curate.run.registry import build_stage
from trident.curate.samples.crawl import SPAM_LINE, sample_pages, write_sample_warc


@pytest.fixture(scope="module")
def sample_docs(tmp_path_factory):
    """(documents of a sample WARC, {url: page kind})."""
    path = tmp_path_factory.mktemp("warc") / "s.warc.gz"
    write_sample_warc(path, n_docs=20, seed=3)
    kinds = {page["url"]: page["kind"] for page in sample_pages(20, seed=3)}
    return list(read_documents(path, RecordLog())), kinds


def fresh(docs):
    return [Document(d.id, d.text, dict(d.meta)) for d in docs]


def test_defaults_are_the_measured_choices():
    assert build_stage("extract", {}).params["backend"] == "resiliparse"
    assert build_stage("langid", {}).params["backend"] == "fasttext"
    # each backend's probabilities have their own calibration, so each has its own threshold
    assert build_stage("langid", {}).params["threshold"] == 0.3
    assert build_stage("langid", {"backend": "py3langid", "threshold": None}).params["threshold"] == 0.5
    assert build_stage("langid", {"backend": "py3langid", "threshold": 0.8}).params["threshold"] == 0.8
    assert load_pipeline_config("curate-cc").stages[1]["threshold"] is None
    assert bundled_fasttext_model().name == "lid.176.ftz"  # shipped in a wheel: nothing downloaded


@pytest.mark.parametrize("backend", ["resiliparse", "trafilatura"])
def test_each_extract_backend_keeps_the_articles_of_the_sample_warc(sample_docs, backend):
    docs, kinds = sample_docs
    stage = build_stage("extract", {"backend": backend})
    kept = list(stage.process(fresh(docs)))
    assert stage.counters["dropped:non_200"] == 1 and stage.counters["dropped:non_html"] == 2
    english = [d for d in kept if kinds[d.meta["url"]] == "english"]
    assert len(english) == 20 and len(kept) == len(docs) - 3
    for doc in english:
        assert len(doc.text.split()) > 100 and "<p>" not in doc.text
        for boilerplate in ("uses cookies", "All rights reserved", "Popular posts", "analytics"):
            assert boilerplate not in doc.text, (backend, doc.meta["url"])
    spam = [d for d in kept if kinds[d.meta["url"]] == "spam"]
    # a page of one paragraph repeated 40 times keeps it once (plus, for trafilatura, the title)
    assert spam and all(d.text.count(SPAM_LINE) == 1 for d in spam)


@pytest.mark.parametrize("backend", ["fasttext", "py3langid"])
def test_each_langid_backend_names_the_languages_of_the_sample_warc(sample_docs, backend):
    docs, kinds = sample_docs
    texts = list(build_stage("extract", {}).process(fresh(docs)))
    stage = build_stage("langid", {"backend": backend, "languages": ["en"]})
    kept = list(stage.process(texts))
    expected = {"german": "de", "french": "fr"}
    for doc in texts:
        assert doc.meta["language"] == expected.get(kinds[doc.meta["url"]], doc.meta["language"])
        assert 0.0 <= doc.meta["language_score"] <= 1.0
    assert {kinds[d.meta["url"]] for d in kept} >= {"english", "exact_duplicate", "near_duplicate"}
    assert all(kinds[d.meta["url"]] not in expected and d.meta["language"] == "en" for d in kept)
    assert stage.counters["dropped:language:de"] == sum(k == "german" for k in kinds.values())


def test_langid_backends_agree_on_a_multiline_document():
    # fastText reads one line at a time: newlines must not split or break the classification
    text = "This is the first line of an English text.\nAnd here is a second line, also in English.\n" * 3
    for backend in ("fasttext", "py3langid"):
        doc = Document("a", text)
        assert build_stage("langid", {"backend": backend}).apply(doc) is doc
        assert doc.meta["language"] == "en" and doc.meta["language_score"] > 0.5


@pytest.mark.parametrize("stage", ["extract", "langid"])
def test_unknown_backend_is_a_config_error_naming_the_key(stage):
    with pytest.raises(ConfigError, match=f"stage '{stage}'.*'backend'.*'nope'"):
        load_pipeline_config("curate-cc", [f"stages.{stage}.backend=nope"])
    with pytest.raises(CurateError, match="'backend' must be one of"):
        build_stage(stage, {"backend": "nope"})


def test_cli_exits_2_on_an_unknown_backend(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "a b c"}) + "\n")
    out = tmp_path / "out"
    assert main(["curate", "curate-cc", "--input", str(data), "--out", str(out),
                 "stages.extract.backend=beautifulsoup"]) == 2
    err = capsys.readouterr().err
    assert "'backend'" in err and "beautifulsoup" in err and "Traceback" not in err
    assert not (out / "stats.json").exists()
