"""The clean stage's fast ftfy path gives exactly ftfy.fix_text(text, normalization=None): on
crafted texts (mojibake, HTML entities before and after a "<", line breaks, terminal escapes,
controls, curly quotes, ligatures, full-width letters) and on random mixtures of them."""
import random

import ftfy
import pytest

from trident.curate.extract.unicode_fix import fix_text

PIECES = ["plain ascii words", " ", "\n", "\n\n", "&amp;", "&lt;b&gt;", "<b>", "&#39;", "&", ";", "doesnâ€™t",
          "cafÃ©", "Ã©", "’", "“quoted”", "ﬁne", "ＡＢＣ", "\r\n", "\r", "\x1b[31mred\x1b[0m", "\x00", "\x7f",
          "\x0c", "\t", "\u2028", "\x85", "naïve", "—", "…", "\u00a0", "ðŸ˜€", "\ud800",
          "é", "©", "中文", "œ", "Œ", "Ð", "µ", "â", "Â", "ʼ", "×", "½"]  # lines kept whole unless a fixer could fire
CRAFTED = ["", "only ascii here.\nsecond line\n", "The Mona Lisa doesnâ€™t have eyebrows.",
           "AT&amp;T\n<p>tag</p>\nAT&amp;T again", "a &amp; b\nno tag, entity &lt; kept?",
           "line one\r\nline two\rthree", "\x1b[1mbold\x1b[0m and \x00null", "“Curly” and ‘single’ quotes",
           "ﬁnancial ﬂow", "ＦＵＬＬ width", "trailing entity &eacute;", "x" * 5000 + "\nÃ©\n" + "y" * 5000,
           "À        A\nÂ        A\n"]  # ftfy's badness pattern has "^[ÃÂ][ ]": a line start, not a text start


@pytest.mark.parametrize("text", CRAFTED)
def test_fast_path_equals_ftfy_on_crafted_texts(text):
    assert fix_text(text) == ftfy.fix_text(text, normalization=None)


def test_fast_path_equals_ftfy_on_random_mixtures():
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))
        assert fix_text(text) == ftfy.fix_text(text, normalization=None), repr(text)


def test_text_that_ftfy_would_change_is_changed():
    assert fix_text("doesnâ€™t") == "doesn't" and fix_text("a &amp; b") == "a & b"
    assert fix_text("<p>\na &amp; b") == "<p>\na &amp; b"  # after a "<", entities are left alone


def test_fast_path_cuts_long_lines_where_ftfy_does(monkeypatch):
    from trident.curate.extract import unicode_fix

    monkeypatch.setattr(unicode_fix, "_CONFIG", unicode_fix._CONFIG._replace(max_decode_length=7))
    rng = random.Random(1)
    for _ in range(300):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 20)))
        assert fix_text(text) == ftfy.fix_text(text, normalization=None, max_decode_length=7), repr(text)


def test_mojibake_is_looked_for_only_where_it_can_be_and_found_as_ftfy_finds_it():
    from ftfy import badness

    from trident.curate.extract.unicode_fix import _MOJIBAKE, looks_bad

    assert _MOJIBAKE is not None  # ftfy's pattern is of the shape the windows rely on
    alphabet = list("abc \n’“é©ÃÂâ€œ™Ð¸Œœ×½µ¦ª") + ["Â ", "Ã©", "â€™"]
    rng = random.Random(2)
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        assert looks_bad(text) == badness.is_bad(text), repr(text)
