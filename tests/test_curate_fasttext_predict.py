"""trident's compiled fastText predict (curate/extract/fasttext_model.py, fasttext_loops.py) gives
fastText's own labels and probabilities, bit for bit, for lid.176 (fasttext-predict is the reference)."""
import random

import pytest

from trident.curate.extract.fasttext_model import fasttext_hash, load_fasttext
from trident.curate.extract.langid import bundled_fasttext_model

fasttext = pytest.importorskip("fasttext", reason="fasttext-predict (the reference) is not installed on this Python")

SENTENCES = [
    "The package manager resolves every dependency before it installs anything.",
    "Der Paketmanager löst jede Abhängigkeit auf, bevor er etwas installiert.",
    "Le gestionnaire de paquets résout chaque dépendance avant d'installer quoi que ce soit.",
    "Менеджер пакетов разрешает все зависимости перед установкой.",
    "软件包管理器在安装任何东西之前解析每个依赖项。", "パッケージマネージャーはすべての依存関係を解決します。",
    "مدير الحزم يحل كل تبعية قبل تثبيت أي شيء", "El gestor de paquetes resuelve cada dependencia.",
]
EDGES = ["", " ", "\t\x0b\x0c\r\x00", "__label__en", "__label__xx words after a label-like token",
         "before </s> after the end of the line", "</s>", "x" * 5000, "é" * 300, "😀 emoji 😀😀",
         "a\u00a0non-breaking\u3000space", "line one\nline two", "12345 678", "ab\x00cd\x0bef"]


def random_texts(count: int, seed: int = 0) -> list[str]:
    """Word salads over many scripts, whitespace kinds and lengths (1 to ~600 characters)."""
    rnd = random.Random(seed)
    words = " ".join(SENTENCES).split() + ["</s>", "__label__de", "x", "Ä", "ß", "ﬁ", "\u200b"]
    spaces = [" ", " ", " ", "  ", "\t", "\x0b", "\x0c", "\r", "\x00", "\u00a0"]
    texts = []
    for _ in range(count):
        pieces = [rnd.choice(words) + rnd.choice(spaces) for _ in range(rnd.randrange(1, 60))]
        texts.append("".join(pieces))
    return texts


def test_compiled_predict_equals_fasttext_bit_for_bit():
    reference = fasttext.load_model(str(bundled_fasttext_model()))
    model = load_fasttext(bundled_fasttext_model())
    texts = SENTENCES + EDGES + random_texts(3000)
    ours = model.predict_two(texts)
    for text, guesses in zip(texts, ours):
        labels, probabilities = reference.predict(text.replace("\n", " "), k=2)
        assert guesses == [(label[9:], float(p)) for label, p in zip(labels, probabilities)], repr(text[:80])
    assert {guesses[0][0] for guesses in ours[:len(SENTENCES)]} == {"en", "de", "fr", "ru", "zh", "ja", "ar", "es"}
    assert model.predict_two([]) == []


def test_model_reader_hash_and_refusals(tmp_path):
    assert fasttext_hash(b"</s>") == 3617362777 and fasttext_hash("é".encode()) == 1023043777  # bytes as signed chars
    model = load_fasttext(bundled_fasttext_model())
    assert len(model.labels) == 176 and model.labels[0] == "en" and model.rows.shape[1] == 16
    not_a_model = tmp_path / "model.ftz"
    not_a_model.write_bytes(b"\0" * 64)
    with pytest.raises(ValueError, match="model.ftz: not a fastText model"):
        load_fasttext(not_a_model)
