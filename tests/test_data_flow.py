"""The data flow end to end, as `trident demo` runs it: embedded corpus -> tokenizer -> indexed
dataset -> packed samples that decode back to the corpus text."""
import json

import numpy as np
import pytest

from trident.config import DataConfig
from trident.data.build import build_datasets, tokenize_files
from trident.data.stdlib_corpus import build_stdlib_corpus
from trident.data.tokenizer import Tokenizer, train_tokenizer


@pytest.mark.timeout(120)
def test_corpus_to_samples(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    assert build_stdlib_corpus(corpus, max_docs=25) == 25
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()]
    tokenizer = train_tokenizer([corpus], vocab_size=600, out=tmp_path / "tok")
    stats = tokenize_files([corpus], tmp_path / "ds", tmp_path / "tok", progress=False)
    assert stats["documents"] == 25 and stats["bad_lines_total"] == 0
    config = DataConfig(paths=[str(tmp_path / "ds")], tokenizer=str(tmp_path / "tok"), valid_fraction=0.1)
    train, valid = build_datasets(config, seq_length=64, train_samples=200, valid_samples=8, seed=0)
    assert len(train) == 200 and len(valid) == 8
    tok = Tokenizer.load(config.tokenizer)
    assert tok.vocab_size == tokenizer.vocab_size
    for dataset in (train, valid):
        for i in range(0, len(dataset), 7):
            sample = dataset[i]
            assert sample.dtype == np.int64 and sample.shape == (65,)
            # split at EOD; every whole piece between two EODs is a complete corpus document
            pieces = np.split(sample, np.flatnonzero(sample == tok.eod_id))
            inner = [p[1:] for p in pieces[1:-1]]
            for piece in inner:
                assert tok.decode(piece) in texts
            # the first piece is the tail of a document; a cut multi-byte character decodes to U+FFFD
            head = tok.decode(pieces[0]).strip("\ufffd")
            assert any(head in t for t in texts)


def test_signatures_never_show_process_state(monkeypatch):
    import os

    from trident.data.stdlib_corpus import _signature

    monkeypatch.setenv("TRIDENT_CORPUS_PROBE", "a value that must not reach training data")

    def parse(fp=None, environ=os.environ, separator="&"):  # as cgi.parse in the standard library
        """Parse a query."""

    shown = _signature(parse)
    assert shown == "(fp=None, environ=..., separator='&')"
    assert "TRIDENT_CORPUS_PROBE" in repr(os.environ)  # the process state was there to leak
