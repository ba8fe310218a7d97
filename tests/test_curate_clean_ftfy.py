"""The clean stage's fast ftfy path gives exactly ftfy.fix_text(text, normalization=None): on
crafted texts (mojibake, HTML entities before and after a "<", line breaks, terminal escapes,
controls, curly quotes, ligatures, full-width letters) and on random mixtures of them."""
import random

import ftfy
import pytest

from trident.curate.extract.clean import fix_text

PIECES = ["plain ascii words", " ", "\n", "\n\n", "&amp;", "&lt;b&gt;", "<b>", "&#39;", "&", ";", "doesnâ€™t",
          "cafÃ©", "Ã©", "’", "“quoted”", "ﬁne", "ＡＢＣ", "\r\n", "\r", "\x1b[31mred\x1b[0m", "\x00", "\x7f",
          "\x0c", "\t", "\u2028", "\x85", "naïve", "—", "…", "\u00a0", "ðŸ˜€", "\ud800"]
CRAFTED = ["", "only ascii here.\nsecond line\n", "The Mona Lisa doesnâ€™t have eyebrows.",
           "AT&amp;T\n<p>tag</p>\nAT&amp;T again", "a &amp; b\nno tag, entity &lt; kept?",
           "line one\r\nline two\rthree", "\x1b[1mbold\x1b[0m and \x00null", "“Curly” and ‘single’ quotes",
           "ﬁnancial ﬂow", "ＦＵＬＬ width", "trailing entity &eacute;", "x" * 5000 + "\nÃ©\n" + "y" * 5000]


@pytest.mark.parametrize("text", CRAFTED)
def test_fast_path_equals_ftfy_on_crafted_texts(text):
    assert fix_text(text) == ftfy.fix_text(text, normalization=None)


def test_fast_path_equals_ftfy_on_random_mixtures():
    rng = random.Random(0)
    for _ in range(400):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))
        assert fix_text(text) == ftfy.fix_text(text, normalization=None), repr(text)


def test_text_that_ftfy_would_change_is_changed():
    assert fix_text("doesnâ€™t") == "doesn't" and fix_text("a &amp; b") == "a & b"
    assert fix_text("<p>\na &amp; b") == "<p>\na &amp; b"  # after a "<", entities are left alone
