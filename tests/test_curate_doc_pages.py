"""Rules that dropped good documentation pages (benchmarks/curate_real_sites.py found them on
Debian-packaged manuals): a section whose generated id reads as page chrome, and a code-heavy
page whose language the model is unsure of. (min_length's GPT-2 pieces: tests/test_curate_stages.py.)"""
import pytest

from trident.curate.document import CurateError, Document
from trident.curate.extract.langid import fasttext_classifier, py3langid_classifier
from trident.curate.run.registry import build_stage

ARTICLE = ("<p>Set the smallest and largest exponents allowed for a floating-point variable. Return a non-zero "
           "value when exp is not in the range accepted by the implementation, and zero otherwise.</p>")
PAGE = """<html><head><title>{title}</title></head><body>
<div class="header"><p>Next: <a href="n.html">Memory Handling Functions</a>, Up: <a href="u.html">MPFR Interface</a></p>
</div>{body}
<div id="related-posts"><h3>Related posts</h3><p>Another article about floating point exponents you may like.</p></div>
</body></html>"""
# texinfo names a section after its title; Sphinx too: resiliparse reads "related", "copyright" as chrome
TEXINFO = PAGE.format(title="Exception Related Functions", body=(
    '<div class="section" id="Exception-Related-Functions"><h3 class="section">5.13 Exception Related Functions</h3>'
    '<dl class="def"><dt>Function: int mpfr_set_emin (mpfr_exp_t exp)</dt><dd>' + ARTICLE + '</dd></dl></div>'))
SPHINX = PAGE.format(title="Copyright", body='<section id="copyright"><h1>Copyright</h1>' + ARTICLE + '</section>')


def extract(html: str) -> str:
    stage = build_stage("extract", {"backend": "resiliparse"})
    doc = Document("p", html, {"url": "https://docs.example/p.html", "content_type": "text/html"})
    return stage.apply(doc).text


@pytest.mark.parametrize("html", [TEXINFO, SPHINX], ids=["texinfo", "sphinx"])
def test_sections_named_after_their_heading_are_article_text(html):
    text = extract(html)
    assert "Set the smallest and largest exponents" in text
    assert "Another article" not in text  # a block named for its role is still chrome


def test_code_heavy_page_kept_by_its_language_margin():
    # the text extract gives of PostgreSQL 15's manual page spi-spi-gettypeid.html (Debian postgresql-doc-15;
    # PostgreSQL License): fastText gives English 0.23, the runner-up 0.04
    page = ("SPI_gettypeid\nPrev\xa0\t\tUp\t\t47.2.\xa0Interface Support Functions\t\tHome\t\t\xa0Next\n\n"
            "SPI_gettypeid — return the data type OID of the specified column\n\nSynopsis\n\n"
            "Oid SPI_gettypeid(TupleDesc rowdesc, int colnumber)\n\nDescription\n\nSPI_gettypeid returns the OID of "
            "the data type of the specified column.\n\nArguments\n\nTupleDesc rowdesc\n\ninput row description\n\n"
            "int colnumber\n\ncolumn number (count starts at 1)\n\nReturn Value\n\nThe OID of the data type of the "
            "specified column or InvalidOid on error. On error, SPI_result is set to SPI_ERROR_NOATTRIBUTE.\n\n"
            "Prev\xa0\t\tUp\t\t\xa0Next\nSPI_gettype\xa0\t\tHome\t\t\xa0SPI_getrelname")
    docs = [Document("code", page)]
    strict = build_stage("langid", {"languages": ["en"]})
    assert strict.apply(docs[0]) == "low_confidence"
    margin = build_stage("langid", {"languages": ["en"], "min_margin": 2.0})
    assert margin.apply(Document("code", page)) != "low_confidence" and margin.counters["kept:margin"] == 1
    german = Document("de", "Die Stadt liegt an einem breiten Fluss, der im Frühjahr oft über die Ufer tritt.")
    assert margin.apply(german) == "language:de"
    for classify in (fasttext_classifier(), py3langid_classifier()):  # both backends give the runner-up
        language, probability, runner_up = classify(page)
        assert language == "en" and 0 <= runner_up <= probability <= 1
    with pytest.raises(CurateError, match="min_margin"):
        build_stage("langid", {"min_margin": 0.5})
