"""Quality classifier (GPT-3 / MT-NLG style): hashed word n-gram features + logistic regression,
trained with curated text as positive and raw web text as negative; documents are kept by Pareto
sampling: keep when `rng.pareto(alpha) > 1 - score`.

A model file is one safetensors file: tensors "coef" (float64, n_features) and "intercept"
(float64, 1), and metadata "trident_quality" (JSON: hashing parameters, training summary). No
pickle: loading reads numbers only, and a reloaded model scores bit-identically.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import xxhash

from trident.curate.document import CurateError, Document
from trident.curate.stage import StreamingStage, register_stage
from trident.text.storage import local_copy, location, make_folder

FORMAT = "trident-quality-v1"
HIST_BINS = 20


class QualityModel:
    """Hashing parameters + linear weights; `score(texts)` is P(high quality) per text."""

    def __init__(self, coef: np.ndarray, intercept: float, n_features: int, ngram_range: tuple[int, int],
                 info: dict | None = None) -> None:
        self.coef = np.ascontiguousarray(coef, dtype=np.float64).reshape(-1)
        self.intercept = np.float64(intercept)
        self.n_features = int(n_features)
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))
        self.info = info or {}
        if self.coef.shape[0] != self.n_features:
            raise CurateError(f"quality model: coef has {self.coef.shape[0]} weights, expected {self.n_features}")

    def vectorizer(self):
        return make_vectorizer(self.n_features, self.ngram_range)

    def score(self, texts: list[str]) -> np.ndarray:
        from scipy.special import expit

        features = self.vectorizer().transform(texts)
        return expit(features @ self.coef + self.intercept)

    def save(self, path: Path | str) -> None:
        """The model as one safetensors file, at a local path or a URL."""
        from safetensors.numpy import save

        meta = {"format": FORMAT, "n_features": self.n_features, "ngram_range": list(self.ngram_range),
                "info": self.info}
        path = location(path)
        make_folder(path.parent)
        path.write_bytes(save({"coef": self.coef, "intercept": np.array([self.intercept])},
                              metadata={"trident_quality": json.dumps(meta)}))

    @classmethod
    def load(cls, path: Path | str) -> "QualityModel":
        from safetensors import safe_open

        path = location(path)
        if not path.exists():
            raise CurateError(f"quality model '{path}' not found (train one: trident curate train-quality)")
        try:
            with safe_open(str(local_copy(path, "quality-models")), framework="numpy") as handle:  # mapped: local
                meta = json.loads((handle.metadata() or {}).get("trident_quality", "{}"))
                coef, intercept = handle.get_tensor("coef"), handle.get_tensor("intercept")
        except Exception as err:  # safetensors raises its own error types for a broken file
            raise CurateError(f"quality model '{path}': not a readable safetensors file ({err})") from err
        if meta.get("format") != FORMAT:
            raise CurateError(f"quality model '{path}': metadata format {meta.get('format')!r}, expected {FORMAT}")
        return cls(coef, float(intercept[0]), meta["n_features"], tuple(meta["ngram_range"]), meta.get("info"))


def make_vectorizer(n_features: int, ngram_range: tuple[int, int]):
    """Stateless hashed n-gram features: the same parameters always give the same columns."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(n_features=n_features, ngram_range=tuple(ngram_range), alternate_sign=False,
                             norm="l2", lowercase=True, dtype=np.float64)


def train_quality_model(positive: list[str], negative: list[str], n_features: int = 1 << 18,
                        ngram_range: tuple[int, int] = (1, 2), C: float = 1.0, seed: int = 0,
                        holdout: float = 0.1) -> QualityModel:
    """Fit logistic regression on hashed features (label 1 = positive); holdout metrics in `info`."""
    from sklearn.linear_model import LogisticRegression

    if not positive or not negative:
        raise CurateError(f"train-quality needs documents in both classes (got {len(positive)} positive, "
                          f"{len(negative)} negative)")
    texts = list(positive) + list(negative)
    labels = np.array([1] * len(positive) + [0] * len(negative))
    order = np.random.default_rng(seed).permutation(len(texts))
    n_test = int(len(texts) * holdout) if len(texts) >= 20 else 0
    test, train = order[:n_test], order[n_test:]
    features = make_vectorizer(n_features, ngram_range).transform(texts)
    clf = LogisticRegression(C=C, max_iter=1000, random_state=seed)
    clf.fit(features[train], labels[train])
    info = {"positive_docs": len(positive), "negative_docs": len(negative), "C": C, "seed": seed,
            "train_accuracy": float(clf.score(features[train], labels[train]))}
    if n_test:
        info["holdout_docs"] = n_test
        info["holdout_accuracy"] = float(clf.score(features[test], labels[test]))
    return QualityModel(clf.coef_[0], float(clf.intercept_[0]), n_features, ngram_range, info)


def pareto_keep(doc_id: str, score: float, alpha: float, seed: int) -> bool:
    """GPT-3's rule, keep when pareto(alpha) > 1 - score, with a draw seeded by (seed, document id)
    so the decision does not depend on shard layout, worker count or executor."""
    rng = np.random.default_rng([seed, xxhash.xxh64_intdigest(doc_id.encode("utf-8"))])
    return bool(rng.pareto(alpha) > 1.0 - score)


@register_stage("quality")
class Quality(StreamingStage):
    """Scores documents with a quality model (meta "quality_score") and keeps them by Pareto
    sampling; drops `pareto_sample`. Only documents of `datasets` are scored (null: all); others
    pass through (counted as `passthrough:dataset`). Adds histogram counters hist:quality_score:NN."""

    score_key = "quality_score"

    def __init__(self, model: str, alpha: float = 9.0, seed: int = 0, datasets: list[str] | None = None,
                 batch_size: int = 256) -> None:
        if not model:
            raise ValueError("needs model=PATH (train one with: trident curate train-quality)")
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        super().__init__(model=model, alpha=alpha, seed=seed, datasets=datasets, batch_size=batch_size)
        self._model: QualityModel | None = None

    def setup(self) -> None:
        self._model = QualityModel.load(self.params["model"])

    def process(self, docs: Iterable[Document]) -> Iterator[Document]:
        if self._model is None:
            self.setup()
        batch: list[Document] = []
        for doc in docs:
            self.counters["in"] += 1
            self.counters["bytes_in"] += doc.nbytes
            datasets = self.params["datasets"]
            if datasets is not None and doc.meta.get("dataset") not in datasets:
                self.counters["passthrough:dataset"] += 1
                yield from self._score_batch(batch)  # flush first: output order == input order
                batch = []
                yield self._kept(doc)
                continue
            batch.append(doc)
            if len(batch) >= self.params["batch_size"]:
                yield from self._score_batch(batch)
                batch = []
        yield from self._score_batch(batch)

    def _score_batch(self, batch: list[Document]) -> Iterator[Document]:
        if not batch:
            return
        scores = self._model.score([doc.text for doc in batch])
        for doc, score in zip(batch, scores):
            doc.meta["quality_score"] = round(float(score), 6)
            self.counters[f"hist:quality_score:{min(int(score * HIST_BINS), HIST_BINS - 1):02d}"] += 1
            if pareto_keep(doc.id, float(score), self.params["alpha"], self.params["seed"]):
                yield self._kept(doc)
            else:
                self.drop(doc, "pareto_sample")

    def _kept(self, doc: Document) -> Document:
        self.counters["out"] += 1
        self.counters["bytes_out"] += doc.nbytes
        return doc


def texts_from_files(paths: list[Path | str], max_docs: int | None = None, strict: bool = False) -> list[str]:
    """Document texts from input files of any supported format; HTML (WARC/.html) is reduced to its
    main text first, exactly as the `extract` stage does. Bad records are skipped and counted by the
    reader (strict: raise instead)."""
    from trident.curate.extract.html import Extract
    from trident.curate.read.record_log import RecordLog
    from trident.curate.read.shards import read_documents

    texts: list[str] = []
    for path in paths:
        extract = Extract()
        extract.setup()
        for doc in extract.process(read_documents(location(path), RecordLog(strict=strict))):
            texts.append(doc.text)
            if max_docs is not None and len(texts) >= max_docs:
                return texts
    return texts
