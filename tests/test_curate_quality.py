"""Quality classifier: trains on curated-vs-raw text, saves without pickle, reloads bit-identically,
and keeps documents by seeded Pareto sampling independent of batching."""
import json

import numpy as np
import pytest

from trident.cli import main
from trident.curate.document import CurateError, Document
from trident.curate.filters.quality import QualityModel, pareto_keep, train_quality_model
from trident.curate.run.registry import build_stage
from trident.curate.samples.crawl import reference_articles

SPAM = ["Buy cheap watches online best price", "click here now free shipping", "hot deals casino bonus",
        "login register cart checkout", "best replica bags sale discount", "win money fast no deposit"]


def _negatives(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" | ".join(rng.choice(SPAM, size=8)) + f" page {i}" for i in range(n)]


@pytest.fixture(scope="module")
def corpus():
    positives = reference_articles()[:60]
    return positives, _negatives(60)


def test_model_separates_classes_and_reloads_bit_identically(tmp_path, corpus):
    positives, negatives = corpus
    model = train_quality_model(positives, negatives, n_features=1 << 14, seed=0)
    assert model.info["holdout_accuracy"] >= 0.9
    texts = positives[:5] + negatives[:5] + ["A new text about the import statement and name binding."]
    scores = model.score(texts)
    assert scores[:5].min() > 0.5 > scores[5:10].max()
    path = tmp_path / "quality.safetensors"
    model.save(path)
    assert b"pickle" not in path.read_bytes()[:2000] and path.read_bytes()[8:9] == b"{"  # safetensors header
    loaded = QualityModel.load(path)
    assert np.array_equal(loaded.coef, model.coef) and loaded.intercept == model.intercept
    assert np.array_equal(loaded.score(texts), scores)  # bit-identical, not approximately equal
    assert loaded.info == model.info


def test_training_is_deterministic(corpus):
    positives, negatives = corpus
    a = train_quality_model(positives, negatives, n_features=1 << 12, seed=3)
    b = train_quality_model(positives, negatives, n_features=1 << 12, seed=3)
    assert np.array_equal(a.coef, b.coef)


def test_pareto_rule_is_seeded_per_document():
    decisions = [pareto_keep(f"doc-{i}", 0.5, alpha=9.0, seed=7) for i in range(2000)]
    assert decisions == [pareto_keep(f"doc-{i}", 0.5, alpha=9.0, seed=7) for i in range(2000)]
    assert decisions != [pareto_keep(f"doc-{i}", 0.5, alpha=9.0, seed=8) for i in range(2000)]
    # P(pareto(9) > 1 - s) = (2 - s)^-9 for the numpy (Lomax) Pareto: s=0.5 keeps ~2.6%.
    assert abs(np.mean(decisions) - 1.5 ** -9) < 0.015
    assert all(pareto_keep(f"doc-{i}", 1.0, 9.0, 0) for i in range(200))  # score 1 is always kept


def test_quality_stage_scores_samples_and_counts(tmp_path, corpus):
    positives, negatives = corpus
    path = tmp_path / "q.safetensors"
    train_quality_model(positives, negatives, n_features=1 << 14).save(path)
    docs = [Document(f"p{i}", t, {"dataset": "cc"}) for i, t in enumerate(positives[:20])]
    docs += [Document(f"n{i}", t, {"dataset": "cc"}) for i, t in enumerate(_negatives(20, seed=5))]
    docs += [Document("wiki", "short curated text", {"dataset": "wikipedia"})]

    def run(batch_size):
        stage = build_stage("quality", {"model": str(path), "alpha": 9.0, "seed": 1, "datasets": ["cc"],
                                        "batch_size": batch_size})
        kept = list(stage.process([Document(d.id, d.text, dict(d.meta)) for d in docs]))
        return kept, stage.counters

    kept, counters = run(256)
    assert counters["in"] == 41 == counters["out"] + counters["dropped:pareto_sample"]
    assert counters["passthrough:dataset"] == 1 and "quality_score" not in kept[-1].meta
    assert sum(v for k, v in counters.items() if k.startswith("hist:quality_score:")) == 40
    kept_ids = {d.id for d in kept}
    assert sum(i.startswith("p") for i in kept_ids) > sum(i.startswith("n") for i in kept_ids)
    assert [d.id for d in run(3)[0]] == [d.id for d in kept]  # batching does not change decisions


def test_quality_stage_needs_a_model(tmp_path):
    with pytest.raises(CurateError, match="train-quality"):
        build_stage("quality", {"model": None})
    stage = build_stage("quality", {"model": str(tmp_path / "missing.safetensors")})
    with pytest.raises(CurateError, match="not found"):
        stage.setup()
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(CurateError, match="not a readable safetensors"):
        QualityModel.load(junk)


def test_train_quality_command_from_jsonl_and_warc(tmp_path, capsys, corpus):
    from trident.curate.samples.crawl import write_sample_warc

    positives, _ = corpus
    pos = tmp_path / "curated.jsonl"
    pos.write_text("".join(json.dumps({"text": t}) + "\n" for t in positives[:40]))
    neg = tmp_path / "raw.jsonl"
    neg.write_text("".join(json.dumps({"text": t}) + "\n" for t in _negatives(40)))
    warc = tmp_path / "crawl.warc.gz"
    write_sample_warc(warc, n_docs=10, seed=0)
    out = tmp_path / "model.safetensors"
    code = main(["curate", "train-quality", "--positive", str(pos), "--negative", str(neg), str(warc),
                 "--out", str(out), "--n-features", "4096", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["positive_docs"] == 40 and summary["negative_docs"] > 40  # WARC pages extracted too
    assert QualityModel.load(out).n_features == 4096


def test_pipeline_with_quality_stage_reports_score_histogram(tmp_path, corpus):
    from trident.curate.run.pipeline import run_pipeline

    positives, negatives = corpus
    model = tmp_path / "q.safetensors"
    train_quality_model(positives, negatives, n_features=1 << 12).save(model)
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in positives[:10] + _negatives(10, seed=9)))
    stats = run_pipeline([{"stage": "quality", "model": str(model), "alpha": 9.0}], [data], tmp_path / "out")
    quality = stats["stages"][1]["counters"]
    assert stats["accounting"]["ok"] and quality["in"] == 20
    assert 0 < quality["out"] < 20
    report = (tmp_path / "out" / "report.md").read_text()
    assert "![quality_score](quality_scores.png)" in report
    assert (tmp_path / "out" / "quality_scores.png").read_bytes()[:4] == b"\x89PNG"
