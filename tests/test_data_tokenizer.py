"""Byte-level BPE: train, save, load (tokenizer.json and GPT-2 vocab.json + merges.txt), round trip."""
import json

import pytest

from trident.data.tokenizer import EOD_TOKEN, Tokenizer, train_tokenizer

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces, trailing spaces   \n\ttabs and\r\nCRLF lines",
    "naïve café façade — «quotes» and ‘curly’ ones",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "emoji 🎉🚀 and combining e\u0301 and zero-width\u200bjoiner",
    "math: ∑ x² ≤ ∞; arrows ←→; null\x00byte and bell\x07",
    "",
]
UNSEEN = "Ünseen wörds: Ελληνικά, русский, עברית, 🦄 " + "".join(chr(c) for c in range(0x2600, 0x2610))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    txt = root / "corpus.txt"
    txt.write_text("\n".join(TEXTS * 20), encoding="utf-8")
    jsonl = root / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"body": t}) + "\n" for t in TEXTS * 20) + "{broken\n", encoding="utf-8")
    tok = train_tokenizer([txt, jsonl], vocab_size=320, out=root / "out", json_key="body")
    return root, tok


def test_train_saves_tokenizer_json_with_eod(trained):
    root, tok = trained
    assert (root / "out" / "tokenizer.json").is_file()
    assert tok.vocab_size <= 320 and tok.vocab_size > 257
    assert tok.hf.id_to_token(tok.eod_id) == EOD_TOKEN
    # learned merges exist: a frequent word encodes to fewer tokens than its bytes
    assert len(tok.encode("quick brown")) < len("quick brown".encode())


@pytest.mark.parametrize("text", TEXTS + [UNSEEN])
def test_encode_decode_identity(trained, text):
    _, tok = trained
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_eod_is_one_token_and_separates(trained):
    _, tok = trained
    ids = tok.encode(f"a{EOD_TOKEN}b")
    assert tok.eod_id in ids
    assert tok.decode(ids) == f"a{EOD_TOKEN}b"


def test_save_load_roundtrip_file_and_directory(trained, tmp_path):
    _, tok = trained
    path = tok.save(tmp_path / "copy.json")
    again = Tokenizer.load(path)
    from_dir = Tokenizer.load(tok.save(tmp_path / "dir"))
    for loaded in (again, from_dir):
        assert loaded.vocab_size == tok.vocab_size and loaded.eod_id == tok.eod_id
        assert loaded.encode(UNSEEN) == tok.encode(UNSEEN)


def test_load_gpt2_vocab_and_merges(trained, tmp_path):
    _, tok = trained
    vocab, merges = tok.save_gpt2_files(tmp_path / "gpt2")
    assert json.loads(vocab.read_text())[EOD_TOKEN] == tok.eod_id
    assert merges.read_text().startswith("#version")
    loaded = Tokenizer.load(tmp_path / "gpt2")
    assert loaded.vocab_size == tok.vocab_size and loaded.eod_id == tok.eod_id
    for text in TEXTS + [UNSEEN]:
        assert loaded.encode(text) == tok.encode(text)
        assert loaded.decode(loaded.encode(text)) == text


def test_gpt2_files_without_eod_get_it_appended(trained, tmp_path):
    _, tok = trained
    vocab, merges = tok.save_gpt2_files(tmp_path / "g")
    table = json.loads(vocab.read_text())
    del table[EOD_TOKEN]
    # ids must stay dense for BPE: renumber to 0..n-1
    table = {t: i for i, t in enumerate(sorted(table, key=table.get))}
    vocab.write_text(json.dumps(table))
    loaded = Tokenizer.load(tmp_path / "g")
    assert loaded.eod_id == len(table) and loaded.vocab_size == len(table) + 1


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere"):
        Tokenizer.load(tmp_path / "nothere.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="vocab.json"):
        Tokenizer.load(tmp_path / "empty")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        Tokenizer.load(bad)


def test_vocab_too_small_and_missing_input(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer([tmp_path / "a.txt"], 100, tmp_path / "t")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        train_tokenizer([tmp_path / "missing.txt"], 300, tmp_path / "t")
