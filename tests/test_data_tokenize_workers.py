"""Tokenizing with worker processes: byte-identical files for any worker count, every document equal
to the tokenizer's own encoding plus EOD, and one worker encoding on one core."""
import json
import os

import numpy as np
import pytest

import trident.data.tokenize_jsonl as tj
from trident.data.build import tokenize_files
from trident.data.indexed import IndexedDataset, IndexedDatasetBuilder
from trident.data.tokenizer import Tokenizer, train_tokenizer

TEXTS = [f"Paragraph {i}: the quick brown fox — naïve café {i * 'xy '} 日本 {'long ' * (i % 13)}" for i in range(90)]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    (root / "train.txt").write_text("\n".join(TEXTS), encoding="utf-8")
    train_tokenizer([root / "train.txt"], 320, root / "tok")
    return root / "tok" / "tokenizer.json"


def corpus(path):
    lines = [json.dumps({"text": t, "id": f"d{i}", "url": f"https://x/{i}"}) for i, t in enumerate(TEXTS)]
    lines[5:5] = ['{"text": ""}', "{oops", "", '{"body": "no text"}']  # empty, malformed, blank, missing
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.timeout(180)
def test_any_worker_count_writes_identical_files(tmp_path, tokenizer_path, monkeypatch):
    monkeypatch.setattr(tj, "CHUNK_LINES", 6)  # many chunks in flight, out of order across workers
    src = corpus(tmp_path / "in.jsonl")
    stats = {w: tokenize_files([src], tmp_path / f"w{w}", tokenizer_path, workers=w, progress=False) for w in (1, 2, 3)}
    for suffix in (".bin", ".idx", ".doc_lines.npy", ".doc_ids.jsonl"):
        assert len({(tmp_path / f"w{w}{suffix}").read_bytes() for w in (1, 2, 3)}) == 1, suffix
    drop = ("seconds", "tokens_per_s", "workers", "output_prefix", "bad_lines_file", "main_process_cpu_s")
    assert len({json.dumps({k: v for k, v in s.items() if k not in drop}) for s in stats.values()}) == 1
    tok, ds = Tokenizer.load(tokenizer_path), IndexedDataset(tmp_path / "w2")
    assert len(ds) == len(TEXTS) and stats[2]["dropped"]["empty_text"] == 1
    for i, text in enumerate(TEXTS):
        assert ds[i].tolist() == tok.encode(text) + [tok.eod_id]
    assert stats[2]["max_token_id"] == max(max(tok.encode(t)) for t in TEXTS + ["<|endoftext|>"])


def test_one_worker_encodes_on_one_thread(tmp_path, tokenizer_path, monkeypatch):
    seen = []
    encode = Tokenizer.encode_batch
    monkeypatch.setattr(Tokenizer, "encode_batch",
                        lambda self, texts: seen.append(os.environ.get("TOKENIZERS_PARALLELISM")) or encode(self, texts))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    tokenize_files([corpus(tmp_path / "in.jsonl")], tmp_path / "o", tokenizer_path, workers=1, progress=False)
    assert seen and set(seen) == {"false"} and os.environ["TOKENIZERS_PARALLELISM"] == "true"


def test_documents_added_together_equal_one_by_one(tmp_path):
    docs = [np.array([1, 2, 3]), np.array([7]), np.array([65535, 0])]
    one, many = IndexedDatasetBuilder(tmp_path / "one"), IndexedDatasetBuilder(tmp_path / "many")
    for doc in docs:
        one.add_document(doc)
    many.add_documents(np.concatenate(docs), [len(d) for d in docs])
    one.finalize(), many.finalize()
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"one{suffix}").read_bytes() == (tmp_path / f"many{suffix}").read_bytes()
    with pytest.raises(ValueError, match="range"):
        IndexedDatasetBuilder(tmp_path / "x").add_documents(np.array([70000]), [1])
    with pytest.raises(ValueError, match="2 documents of 3 tokens"):
        IndexedDatasetBuilder(tmp_path / "y").add_documents(np.array([1, 2]), [1, 2])
