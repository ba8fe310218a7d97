"""The `extract` stage keeps the article's text-bearing lists and tables (links with descriptions,
descriptive link sentences, API lists, definition lists, parameter tables) with both backends,
while menus, sidebars, breadcrumbs, in-article "on this page" links, related headlines, comments,
hidden and repeated lists and footers stay out (trident.curate.extract.lists)."""
import random
import re

import pytest

from trident.curate.document import Document
from trident.curate.extract.lists import Block, Style, _keys, _list_keys, _present, read_block
from trident.curate.extract.placement import Placement, squeeze
from trident.curate.extract.text_index import TextIndex
from trident.curate.run.registry import build_stage

BACKENDS = ["resiliparse", "trafilatura"]
INTRO = ("The Session object allows you to persist certain parameters across requests. It also persists "
         "cookies across all requests made from the Session instance, and will use connection pooling.")
LEAD = "The following guides explain the most common tasks in more depth, one page each:"
OUTRO = ("Sessions can also be used as context managers, which makes sure that the session is closed as "
         "soon as the with block is exited, even if unhandled exceptions occurred inside it.")
# (HTML, texts that must come through)
LINKS_WITH_DESCRIPTIONS = (
    '<ul><li><a href="/cookies">Persisting cookies</a> shows how a session keeps the cookies that a server '
    'sets and sends them back.</li><li><a href="/pool">Connection pooling</a> explains why reusing the '
    'underlying TCP connection makes repeated calls faster.</li><li><a href="/retry">Retries</a> describes '
    "how failed requests are tried again after a growing pause.</li></ul>",
    ["Persisting cookies shows how a session keeps the cookies that a server sets and sends them back.",
     "Retries describes how failed requests are tried again after a growing pause."])
DESCRIPTIVE_LINKS = (
    '<ul><li><a href="/h">Setting default headers for every request made by the session</a></li>'
    '<li><a href="/a">Mounting transport adapters to customise retries and timeouts per host</a></li>'
    '<li><a href="/p">Sending requests through a proxy server that needs authentication</a></li>'
    '<li><a href="/s">Streaming large downloads to a file without reading them into memory</a></li>'
    '<li><a href="/e">Handling the exceptions raised when a connection cannot be made</a></li></ul>',
    ["Setting default headers for every request made by the session",
     "Sending requests through a proxy server that needs authentication"])
API_ITEMS = (
    '<ul class="simple"><li><a href="#auth"><code>auth</code></a> &ndash; default authentication tuple or '
    'object to attach to every request.</li><li><a href="#verify"><code>verify</code></a> &ndash; whether '
    "the TLS certificate of the server is checked, or a path to a bundle.</li></ul>",
    ["auth – default authentication tuple or object to attach to every request."])
DEFINITIONS = (
    '<dl class="py method"><dt><a href="#get"><code>Session.get(url, **kwargs)</code></a></dt><dd><p>Sends a '
    "GET request and returns the Response object.</p></dd><dt><a href=\"#close\"><code>Session.close()</code>"
    "</a></dt><dd><p>Closes all adapters and as such the session itself.</p></dd></dl>",
    ["Sends a GET request and returns the Response object.", "Session.close()"])
PARAMETERS = (
    '<table class="docutils"><thead><tr><th>Parameter</th><th>Description</th></tr></thead><tbody><tr><td>'
    '<a href="#timeout"><code>timeout</code></a></td><td>How many seconds to wait for the server to send data '
    'before giving up.</td></tr><tr><td><a href="#redirects"><code>allow_redirects</code></a></td><td>Whether '
    "redirects are followed when the server answers with a redirect status.</td></tr></tbody></table>",
    ["How many seconds to wait for the server to send data before giving up.", "allow_redirects"])
PLANTED = [LINKS_WITH_DESCRIPTIONS, DESCRIPTIVE_LINKS, API_ITEMS, DEFINITIONS, PARAMETERS]
# Navigation labels: none may come through.
NAVIGATION = ["Docs home", "Release notes", "Report a bug", "Installation guide", "Advanced usage", "Main page",
              "User manual", "Jump to examples", "Privacy policy", "Contact the team", "Mobile menu entry",
              "Why We Moved Our Build System From Make to Bazel", "Ten Tips for Faster Python Packaging",
              "Great write-up, thanks a lot for sharing this with all of us here.", "Next chapter"]


def _links(labels, attrs=""):
    return f"<ul{attrs}>" + "".join(f'<li><a href="/{i}">{label}</a></li>' for i, label in enumerate(labels)) + "</ul>"


def article(blocks):
    """h1, paragraphs around the planted blocks, and the navigation that lives inside an article."""
    return (f"<h1>Session objects</h1><p>On this page:</p>{_links(['Jump to examples', 'Jump to caveats'])}"
            f"<p>{INTRO}</p><p>{LEAD}</p>{''.join(blocks)}<p>{OUTRO}</p>"
            f"<h2>Related articles</h2>{_links(NAVIGATION[11:13])}"
            '<section class="comments"><h3>2 comments</h3><ol><li><p>Great write-up, thanks a lot for sharing '
            "this with all of us here.</p></li><li><p>Does this also work with the older releases?</p></li></ol>"
            f"</section>{_links(['Mobile menu entry', 'Other menu entry'], ' hidden')}")


def docs_page(blocks, shallow=False):
    """A documentation page: menus, a sidebar, a breadcrumb and a footer around the article;
    `shallow`: the article's lists sit right under <body> (resiliparse drops such <ul>s)."""
    crumbs = '<ol class="breadcrumb"><li><a href="/">Main page</a></li><li><a href="/m">User manual</a></li>' \
             "<li>Session objects</li></ol>"
    menu = _links(["Docs home", "Release notes", "Report a bug"])
    footer = _links(["Privacy policy", "Contact the team"])
    pager = f'<div class="pager">{_links(["Next chapter", "Previous chapter"])}</div>'
    if shallow:
        inner = f'<div id="top">{menu}</div><div id="content">{crumbs}{article(blocks)}{pager}</div>{footer}'
    else:
        inner = (f'<header class="site-header"><nav class="navbar">{menu}</nav></header><div class="container">'
                 f'<div class="row"><div class="sphinxsidebar col-md-3"><h3>Contents</h3>'
                 f'{_links(["Installation guide", "Advanced usage"])}</div><div class="col-md-9" role="main">'
                 f"{crumbs}<article>{article(blocks)}</article>{pager}</div></div></div><footer>{footer}</footer>")
    return f"<!DOCTYPE html><html><head><title>Session objects</title></head><body>{inner}</body></html>"


def extract(page, **params):
    stage = build_stage("extract", params)
    kept = list(stage.process([Document("d", page, {"content_type": "text/html", "http_status": 200})]))
    return kept[0].text


def key(text):
    return re.sub(r"\s+", "", text)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shallow", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_article_lists_and_tables_come_through_and_navigation_does_not(backend, shallow):
    text = extract(docs_page([html for html, _ in PLANTED], shallow), backend=backend)
    for _, expected in PLANTED:
        for item in expected:
            assert key(item) in key(text), (backend, shallow, item)
    for label in NAVIGATION:
        assert label not in text, (backend, shallow, label)
    # each block goes back where it was: after the paragraph before it, before the one after it
    assert key(text).index(key(LEAD)) < key(text).index(key(LINKS_WITH_DESCRIPTIONS[1][0])) \
        < key(text).index(key(PARAMETERS[1][0])) < key(text).index(key(OUTRO))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_without_the_post_pass_the_backends_lose_the_lists(backend):
    """The observed loss on documentation pages, and that keep_lists / keep_tables switch it off."""
    page = docs_page([html for html, _ in PLANTED], shallow=True)
    text = extract(page, backend=backend, keep_lists=False, keep_tables=False)
    assert key(DESCRIPTIVE_LINKS[1][0]) not in key(text)
    assert key(PARAMETERS[1][0]) in key(text) if backend == "resiliparse" else key(PARAMETERS[1][0]) not in key(text)
    tables_only = extract(page, backend=backend, keep_lists=False)
    assert key(PARAMETERS[1][0]) in key(tables_only) and key(DESCRIPTIVE_LINKS[1][0]) not in key(tables_only)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_lists_outside_the_article_or_repeated_stay_out(backend):
    """A prose list in an unmarked sidebar column (outside the article container) and a list shown
    twice (in the article and again below it, as menus are): neither comes back."""
    sidebar_prose = _links(["Every release note of the last three years is kept in the archive for you"])
    repeated = DESCRIPTIVE_LINKS[0]
    page = docs_page([repeated]).replace('<div class="col-md-9"', f'<div class="col-md-2"><h4>About</h4>'
                                         f'{sidebar_prose}</div><div class="col-md-9"')
    page = page.replace("</article>", f"</article>{repeated}")
    text = extract(page, backend=backend)
    assert "archive" not in text and key(DESCRIPTIVE_LINKS[1][0]) not in key(text)
    assert INTRO[:40] in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_list_that_opens_its_section_goes_before_the_paragraph_after_it(backend):
    page = docs_page([f"<section>{DESCRIPTIVE_LINKS[0]}<p>{INTRO.replace('Session', 'Adapter')}</p></section>"])
    text = key(extract(page, backend=backend))
    first_link, second_intro = key(DESCRIPTIVE_LINKS[1][0]), key(INTRO.replace("Session", "Adapter"))
    assert key(LEAD) in text and text.index(key(LEAD)) < text.index(first_link) < text.index(second_intro)


@pytest.mark.timeout(60)
def test_blocks_are_read_from_their_html():
    style = Style(bullet="• ", cell_separator=" | ", paragraph_break="\n\n")
    block = read_block(PARAMETERS[0], style)
    assert block.lines[0] == "Parameter | Description"
    assert block.lines[2] == "allow_redirects | Whether redirects are followed when the server answers with a " \
                             "redirect status."
    block = read_block(DEFINITIONS[0], style)
    assert block.lines == ["Session.get(url, **kwargs)", "Sends a GET request and returns the Response object.",
                           "Session.close()", "Closes all adapters and as such the session itself."]
    assert read_block(API_ITEMS[0], style).lines[0] == \
        "• auth – default authentication tuple or object to attach to every request."


@pytest.mark.timeout(60)
def test_on_a_page_laid_out_with_a_table_only_the_prose_table_comes_back():
    """trafilatura without include_tables drops every table; the post-pass brings back the
    parameter table, not the layout table around the page (one holding a heading) with its menu."""
    page = ('<html><body><table><tr><td><a href="/">Docs home</a> <a href="/r">Release notes</a></td></tr><tr><td>'
            f"<h1>Session objects</h1><p>{INTRO}</p><p>{LEAD}</p>{PARAMETERS[0]}<p>{OUTRO}</p></td></tr></table>"
            "</body></html>")
    text = extract(page, backend="trafilatura", favor_precision=False)
    assert key(PARAMETERS[1][0]) in key(text) and "Docs home" not in text


def test_a_block_is_present_when_items_holding_half_its_characters_are_in_the_text():
    """_present looks the longest items up first and stops once the answer is known: its answer is
    the count over every item."""
    rng = random.Random(2)
    words = ["alpha", "beta¶", "gamma delta", "epsilon", "zeta eta theta", "iota", "kappa lambda mu nu"]
    for _ in range(400):
        text = "\n".join(" ".join(rng.sample(words, rng.randrange(1, 4))) for _ in range(rng.randrange(1, 8)))
        items = [" ".join(rng.sample(words, rng.randrange(1, 3))) for _ in range(rng.randrange(1, 7))]
        index = TextIndex.of_lines(text)
        total = sum(len(squeeze(item)) for item in items)
        found = sum(len(squeeze(item)) for item in items if squeeze(item) in squeeze(text))
        assert _present(*_keys(Block(["• " + item for item in items], items)), index) == (found >= total / 2), (text, items)


def test_the_screens_keys_of_a_list_equal_those_of_its_block():
    """The screen's one-pass keys of a list (_list_keys) equal the keys of the block read_block reads."""
    rng = random.Random(6)
    pieces = ["<li>", "<LI class='x'>", "<dt>", "<dd>", "</li>", "<a href='#'>", "</a>", "<p>", "<br>", " ", "\n",
              "&amp;", "&#10;", "word", "Wörd", "\xa0", "<code>x</code>", "<b>", "</b>", "<script>no</script>"]
    style = Style(bullet="• ", cell_separator="\t", paragraph_break="\n\n")
    for fixture in (LINKS_WITH_DESCRIPTIONS, DESCRIPTIVE_LINKS, DEFINITIONS, API_ITEMS):
        assert _list_keys(fixture[0], style) == _keys(read_block(fixture[0], style))
    for _ in range(1000):
        markup = "<ul>" + "".join(rng.choice(pieces) for _ in range(rng.randrange(20)))
        bare = re.sub(r"<script\b.*?</script\s*>", "", markup, flags=re.S | re.I)
        assert _list_keys(bare, style) == _keys(read_block(markup, style)), markup


def test_placement_writes_each_block_in_its_slot():
    """Placement.result copies the lines between slots whole: the text equals the line-by-line layout."""
    rng = random.Random(8)
    for _ in range(300):
        lines = [rng.choice(["", "a b", "cd", "  e"]) for _ in range(rng.randrange(1, 8))]
        text = "\n".join(lines)
        placement = Placement(text, TextIndex.of_lines(text), "\n\n")
        slots = {}
        for block in range(rng.randrange(4)):
            slot = rng.choice([(rng.randrange(len(lines)), rng.choice(["before", "after"])), None])
            placement.add(block, f"B{block}", slot)
            slots.setdefault(slot or (None, "end"), []).append(f"B{block}")
        want = "\n".join("".join(b + "\n\n" for b in slots.get((n, "before"), [])) + line
                         + "".join("\n\n" + b for b in slots.get((n, "after"), [])) for n, line in enumerate(lines))
        if (None, "end") in slots:
            want = want.rstrip() + "".join("\n\n" + b for b in slots[(None, "end")])
        assert placement.result() == want, (lines, slots)
