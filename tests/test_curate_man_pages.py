"""Man pages through curate-cc (issue 60 item 6): a folder of asciidoc man pages, each opening with
its title (`git-add(1) Manual Page`), `NAME` (on every page of the folder) and its one-line summary,
keeps all three after site_lines, which still removes the footer every page shares."""
import random

import pytest

from trident.curate.read.shards import read_shard
from trident.curate.run.pipeline import run_pipeline

pytestmark = pytest.mark.timeout(60)

COMMANDS = ("add", "commit", "push", "fetch", "merge", "rebase", "log", "diff", "status", "branch", "tag", "reset")
WORDS = ("the index holds a snapshot of content in your working tree and this command updates it with changes "
         "you made so that the next commit records them for every file path given on the command line").split()


def _prose(rng: random.Random, sentences: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 18))).capitalize() + "."
                    for _ in range(sentences))


def man_page(command: str, rng: random.Random) -> str:
    """An asciidoc man page (git's layout): the header block, sections, the footer of the suite."""
    options = "".join(f'<dt class="hdlist1">--option-{i}</dt><dd><p>{_prose(rng, 2)}</p></dd>' for i in range(3))
    return f"""<html><head><title>git-{command}(1)</title></head><body class="manpage">
<div id="header"><h1>git-{command}(1) Manual Page</h1><h2>NAME</h2>
<div class="sectionbody"><p>git-{command} - {_prose(rng, 1)[:40].rstrip(" .")}</p></div></div>
<div id="content"><div class="sect1"><h2 id="_synopsis">SYNOPSIS</h2><div class="sectionbody">
<div class="verseblock"><pre class="content">git {command} [--verbose] [--dry-run] [&lt;path&gt;...]</pre></div></div></div>
<div class="sect1"><h2 id="_description">DESCRIPTION</h2><div class="sectionbody">
<p>{_prose(rng, 4)}</p><p>{_prose(rng, 4)}</p></div></div>
<div class="sect1"><h2 id="_options">OPTIONS</h2><div class="sectionbody"><div class="dlist"><dl>{options}</dl></div></div></div>
<div class="sect1"><h2 id="_git">GIT</h2><div class="sectionbody"><p>Part of the <a href="git.html">git(1)</a> suite</p>
</div></div></div><div id="footer"><div id="footer-text">Last updated 2023-01-0{rng.randint(1, 9)}</div></div>
</body></html>"""


def test_man_pages_keep_their_title_name_and_summary_through_curate_cc(tmp_path):
    rng = random.Random(0)
    pages = tmp_path / "man"
    pages.mkdir()
    summaries = {}
    for command in COMMANDS:
        html = man_page(command, rng)
        summaries[f"git-{command}.html"] = html.split('<div class="sectionbody"><p>')[1].split("</p>")[0]
        (pages / f"git-{command}.html").write_text(html)
    stats = run_pipeline("curate-cc", [pages], tmp_path / "out", overrides=["progress=false"])
    docs = [doc for shard in sorted((tmp_path / "out").glob("shard-*.jsonl.zst")) for doc in read_shard(shard)]
    site_lines = next(s for s in stats["stages"] if s["name"] == "site_lines")["counters"]
    assert len(docs) == len(COMMANDS) and site_lines["hosts_with_template"] == 1
    for doc in docs:
        lines = [line for line in doc.text.split("\n") if line.strip()]
        assert lines[:3] == [f"{doc.id[:-5]}(1) Manual Page", "NAME", summaries[doc.id]], doc.text[:200]
        assert "Part of the git(1) suite" not in doc.text  # the footer every page shares: still template
